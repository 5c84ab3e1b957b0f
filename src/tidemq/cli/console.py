"""``tidemq console``: the web console on its own, pointed at a cluster's name server and NSQ HTTP APIs."""

from __future__ import annotations

import click

from tidemq.address import LOCALHOST


def register(main: click.Group) -> None:
    @main.command("console")
    @click.option(
        "--namesrv", "-n", default=f"{LOCALHOST}:9876", show_default=True, help="Name server HOST:PORT."
    )
    @click.option("--nsqd-http", default=None, help="An nsqd's HTTP HOST:PORT, for the NSQ page.")
    @click.option("--lookupd-http", default=None, help="An nsqlookupd's HTTP HOST:PORT, for the NSQ page.")
    @click.option("--listen", default=LOCALHOST, show_default=True, help="Address to serve the console on.")
    @click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
    @click.option(
        "--sample-seconds",
        default=5.0,
        show_default=True,
        type=click.FloatRange(0.1),
        help="TPS sample period.",
    )
    @click.option(
        "--acl",
        is_flag=True,
        help="Ask for an admin account (access key, secret key) before any page. Without it the console "
        "asks once a broker refuses an unsigned call (NO_PERMISSION).",
    )
    def console(
        namesrv: str,
        nsqd_http: str | None,
        lookupd_http: str | None,
        listen: str,
        port: int,
        sample_seconds: float,
        acl: bool,
    ) -> None:
        """Serve the web console (overview, topics, groups, messages, dead letters, NSQ)."""
        import faulthandler

        from tidemq.console import ConsoleSettings
        from tidemq.console.app import run_console

        settings = ConsoleSettings(
            namesrv, nsqd_http=nsqd_http, lookupd_http=lookupd_http, sample_seconds=sample_seconds, acl=acl
        )
        click.echo(f"tidemq console on http://{listen}:{port}/", err=True)
        faulthandler.enable(all_threads=True)  # a native crash leaves every thread's stack in the log
        run_console(settings, listen, port)
