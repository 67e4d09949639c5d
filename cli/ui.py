"""`virtstream ui [--open]`: the web console's address, logged in.

Prints `<api>/ui/#token=<token>` with the credentials every project client finds for the
server (client/credentials.py); without `--server`, the server is the one the data dir's
kubeconfig names (`VIRTSTREAM_DATA_DIR`, or `.virtstream/` here), not always :8080. The
token travels in the fragment, which a browser never
sends to a server; the console moves it into the tab's session storage and out of the
address at once. `--open` hands the address to the desktop's browser. An api that does not
answer, or that wants a token this machine has none for, is one line and exit 1."""

from __future__ import annotations

import webbrowser
from urllib.parse import quote

import httpx
import typer
from rich.console import Console

from cli.settings import settings
from client import credentials

err = Console(stderr=True, soft_wrap=True, highlight=False)


def console_url(server: str, token: str) -> str:
    base = f"{server.rstrip('/')}/ui/"
    return f"{base}#token={quote(token, safe='')}" if token else base


def _fail(message: str) -> typer.Exit:
    err.print(f"error: {message}", markup=False)
    return typer.Exit(1)


def ui(
    open_browser: bool = typer.Option(False, "--open", help="Open it in the desktop's browser"),
) -> None:
    """Print the web console's address, logged in with this machine's credentials."""
    # no --server: the api the data dir names (`up --port` may have put it elsewhere)
    server = settings.server if settings.server_given else credentials.named_server()
    creds = credentials.for_api(server or settings.server)
    try:
        with httpx.Client(**creds.httpx_options(), timeout=10) as http:
            answer = http.get("/apis")
    except httpx.HTTPError as exc:
        raise _fail(
            f"the api at {creds.server} did not answer ({exc}): is `virtstream up` running? "
            "(another api: --server or VIRTSTREAM_SERVER)"
        ) from None
    if answer.status_code == 401:
        raise _fail(
            f"no credentials for {creds.server} on this machine: set VIRTSTREAM_TOKEN, or "
            "VIRTSTREAM_KUBECONFIG (the kubeconfig `virtstream up` wrote)"
        )
    address = console_url(creds.server, creds.token)
    typer.echo(address)
    if creds.ca_pem:
        err.print(
            "the api's certificate is signed by the cluster's own CA (<data dir>/pki/ca.crt): "
            "trust it in the browser, or accept its warning once",
            markup=False,
        )
    if open_browser and not webbrowser.open(address):
        raise _fail("no browser could be started here: open the address above by hand")
