"""The routes the web console adds to the api (`create_app` registers them): its files
(`ui_assets`), an object's history and causes (`history`), and Prometheus' query API
(`prometheus_proxy`)."""

from __future__ import annotations

from services.api import history, prometheus_proxy, ui_assets

WEB_ROUTES = [*ui_assets.ROUTES, *history.ROUTES, *prometheus_proxy.ROUTES]
