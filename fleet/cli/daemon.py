"""``fleet daemon run|start|stop|status``: the store daemon's lifecycle."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from fleet.cli import render
from fleet.cli.common import MAX_BLIP_BYTES, JsonOpt
from fleet.paths import get_paths

app = typer.Typer(help="Run, start, stop and inspect the store daemon.", no_args_is_help=True)


@app.command()
def run(
    listen: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help="Address to serve on [default: 127.0.0.1 on the port remembered in the state dir, "
            "a free one the first time]. A non-loopback address serves other machines, over HTTPS "
            "(tokens are always required).",
        ),
    ] = None,
    max_blip_bytes: Annotated[
        int, typer.Option(help="Largest blip text in bytes of UTF-8.")
    ] = MAX_BLIP_BYTES,
    ui: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help="Also serve the operator console here (e.g. 127.0.0.1:8087); the terminal shows a "
            "one-time login link. Off unless given.",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            metavar="PEM",
            help="Serve this certificate (with --tls-key) instead of the self-signed one made in the "
            "data dir. Clients pin its fingerprint.",
        ),
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(metavar="PEM", help="The key of --tls-cert.")] = None,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="Serve HTTPS on a loopback address too (behind a port forward). Off loopback it always is.",
        ),
    ] = False,
    insecure_plain_http: Annotated[
        bool,
        typer.Option(
            "--insecure-plain-http",
            help="Serve PLAIN HTTP on a non-loopback address: every token crosses the network in clear. "
            "Only for a network you trust entirely.",
        ),
    ] = False,
    store: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Keep the store on PostgreSQL at this postgresql:// URL (needs fleet[postgresql]) instead "
            "of the SQLite file in the data dir; several daemons may serve one such store. "
            "[default: FLEET_STORE, else the SQLite file]",
        ),
    ] = None,
    host_name: Annotated[
        list[str] | None,
        typer.Option(
            "--host-name",
            metavar="NAME",
            help="A name other machines reach this daemon by (repeatable): requests must carry it, "
            "or the bound address, as their Host header.",
        ),
    ] = None,
) -> None:
    """Serve in the foreground until SIGTERM or Ctrl-C; logs go to stderr."""
    from fleet.daemon import Daemon

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    # An address typed on this command line is the explicit ask docs/design.md §2 requires for remote use.
    paths = get_paths()
    daemon = Daemon(
        paths._replace(store_url=store.strip()) if store is not None else paths,
        listen or "127.0.0.1:0",
        max_blip_bytes=max_blip_bytes,
        allow_remote=listen is not None,
        ui=ui,
        allow_remote_ui=ui is not None,
        host_names=host_name or (),
        tls=True if tls else None,
        tls_cert=tls_cert,
        tls_key=tls_key,
        insecure_plain_http=insecure_plain_http,
        remember_port=listen is None,
    )
    daemon.serve_forever()


@app.command()
def start(as_json: JsonOpt = False) -> None:
    """Start the local daemon in the background unless it already runs.

    With --json: the daemon's status (as `fleet daemon status --json` prints it).
    """
    paths = get_paths()
    endpoint, started = _client().start_local_daemon(paths)
    if as_json:
        render.dump(_client().local_status(paths))
    elif started:
        render.out(
            f"started the local daemon at {endpoint.url} (pid {endpoint.pid}, log: {paths.daemon_log})"
        )
    else:
        render.out(f"the local daemon already runs at {endpoint.url} (pid {endpoint.pid})")


@app.command()
def stop(
    timeout: Annotated[
        float,
        typer.Option(
            help="Seconds to wait while the daemon shows no progress (a phase may take its own longer bound)."
        ),
    ] = 10.0,
) -> None:
    """Stop the local daemon (SIGTERM: in-flight writes finish first). Waits as long as the stop
    makes progress (each phase is written to state/daemon.stopping); exit 1 once it stalls.

    Agents connected to it are named: their channels keep their place and reconnect about every
    second, receiving nothing until a daemon answers at the same address again."""
    paths = get_paths()
    connected = _client().connected_agents(paths)
    stopped = _client().stop_local_daemon(paths, timeout=timeout)
    if stopped is None:
        render.out("no local daemon is running")
        return
    render.out(f"stopped the local daemon at {stopped.url} (pid {stopped.pid})")
    if connected:
        n = sum(len(names) for names in connected.values())
        who = "; ".join(f"{wave}: {', '.join(names)}" for wave, names in connected.items())
        render.out(
            f"{n} agent{'s were' if n != 1 else ' was'} connected ({who}): their channels keep their place"
            f" and reconnect about every second, but receive nothing and their fleet tools report the"
            f" daemon unreachable until one answers at {stopped.url} again: `fleet daemon start`"
            " brings it back there"
        )


@app.command()
def status(as_json: JsonOpt = False) -> None:
    """Show whether the daemon runs; exit 3 if it does not.

    The daemon is the one FLEET_DAEMON names (each, when it lists several: exit 3 if none answers),
    else the local one.
    """
    remote = os.environ.get("FLEET_DAEMON", "").strip()
    if remote and "://" not in remote:  # a joined daemon's name
        remote = _client().load_remote(get_paths(), remote).url
    st = _client().remote_status(remote) if remote else _client().local_status(get_paths())
    if as_json:
        render.dump(st)
    elif len(st.daemons) > 1:  # FLEET_DAEMON lists several: each one and whether it answers
        render.out(f"{sum(p.answers for p in st.daemons)} of {len(st.daemons)} listed daemons answer:")
        for p in st.daemons:
            said = f"answers, pid {p.pid}, version {p.version}" if p.answers else f"no answer ({p.reason})"
            render.out(f"  {p.url}\t{said}")
    elif st.running:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.started_at)) if st.started_at else ""
        where = "FLEET_DAEMON" if st.remote else "local"
        render.out(f"running ({where}) at {st.url}, pid {st.pid}, version {st.version}")
        if since:
            render.out(f"started {since}; log: {st.log}")
    else:
        if st.remote:
            render.out(f"nothing answers at {st.url} (FLEET_DAEMON): check the address, or unset it")
        else:
            render.out("no daemon is running locally: start one with `fleet daemon start`")
    if not st.running:
        raise typer.Exit(3)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="daemon")


def _client() -> ModuleType:
    """fleet.client, imported by the command that talks to a daemon (not by ``--help``)."""
    from fleet import client

    return client
