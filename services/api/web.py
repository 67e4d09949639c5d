"""The routes the web console adds to the api (`create_app` registers them): its files
(`ui_assets`), an object's history and causes (`history`), the shadows' latest divergences
(`shadows`), what-if replays (`whatif_runs`) and Prometheus' query API (`prometheus_proxy`)."""

from __future__ import annotations

from services.api import history, prometheus_proxy, shadows, ui_assets, whatif_runs

WEB_ROUTES = [
    *ui_assets.ROUTES,
    *history.ROUTES,
    *shadows.ROUTES,
    *whatif_runs.ROUTES,
    *prometheus_proxy.ROUTES,
]
