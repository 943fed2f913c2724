"""Setting up: ``init``, and the ``host`` commands that drive the reference host."""

import click

from .output import emit, table
from .plumbing import INT64, INT64_MAX, command, group, mcp_module


@command()
def init(obj, as_json):
    """Create the home, its config and databases (idempotent; never resets data)."""
    from ..app import Signoff
    rt = Signoff.init(obj.home)
    click.get_current_context().call_on_close(rt.close)
    emit({"home": str(rt.home), "config": str(rt.home / "signoff.toml")}, as_json,
         lambda d: f"signoff home ready at {d['home']}")


@group()
def host():
    """Drive the reference host (records, materials, grant, faults, results)."""


@command("record", group=host)
@click.option("--id", "record_id", required=True)
@click.option("--document")
@click.option("--version", type=INT64)
@click.option("--status")
@click.option("--kind")
@click.option("--tenant")
@click.option("--text")
def host_record(obj, as_json, record_id, **changes):
    """Insert or update a record; options not given keep their value.

    A new record is published as `comment.created` when `host mcp --events` serves this home.
    """
    from ..hosts.reference import EVENTS_FILENAME
    reference = obj.reference_host()
    new = not reference.has_record(record_id)
    record = reference.put_record(record_id, **changes)
    store = reference.path.parent / EVENTS_FILENAME
    if new and store.exists():
        mcp_module("hostserver").publish_created(store, record)
    emit(record, as_json)


@command("material", group=host)
@click.option("--document", required=True)
@click.option("--demo-date", required=True)
def host_material(obj, as_json, document, demo_date):
    """Set the material for a document."""
    emit(obj.reference_host().put_material(document, demo_date), as_json)


@command("grant", group=host)
@click.option("--tenant")
@click.option("--user")
@click.option("--doc", "docs", multiple=True)
@click.option("--action", "actions", multiple=True)
@click.option("--revision", type=INT64)
def host_grant(obj, as_json, tenant, user, docs, actions, revision):
    """Change the current grant context; options not given keep their value."""
    grant = obj.reference_host().put_grant(tenant=tenant, user=user, docs=list(docs) or None,
                                           actions=list(actions) or None, revision=revision)
    emit(grant, as_json)


@command("fault", group=host)
@click.argument("name")
@click.option("--times", type=click.IntRange(min=1, max=INT64_MAX), default=1, show_default=True)
def host_fault(obj, as_json, name, times):
    """Arm a fault (read-timeout, lose-ack, bad-receipt, crash-after-write), or `clear` them all."""
    ref = obj.reference_host()
    faults = ref.clear_faults() if name == "clear" else ref.set_fault(name, times)
    emit({"faults": faults}, as_json)


@command("results", group=host)
def host_results(obj, as_json):
    """Results written to the reference host."""
    emit(obj.reference_host().results(), as_json,
         lambda rows: table([{"key": r["key"], "result": r["result"]} for r in rows],
                            ["key", "result"]))


@command("mcp", group=host)
@click.option("--http", "over_http", is_flag=True,
              help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=0, show_default=True,
              help="With --http (0: a free port; the URL is printed as JSON).")
@click.option("--events", is_flag=True,
              help="With --http: offer MCP Events (comment.created, published by `host record`).")
@click.option("--loopback-callbacks", is_flag=True,
              help="With --events: deliver only to this machine, plain http allowed (tests, demo).")
def host_mcp(obj, as_json, over_http, port, events, loopback_callbacks):
    """Serve the reference host as an MCP server (for `signoff.hosts.mcp:McpHost`)."""
    if (events or loopback_callbacks or port) and not over_http:
        raise click.UsageError("--port, --events and --loopback-callbacks need --http")
    if loopback_callbacks and not events:
        raise click.UsageError("--loopback-callbacks needs --events")
    reference = obj.reference_host()  # no home: refused before the SDK is imported
    server = mcp_module("hostserver")
    if over_http:
        server.serve_http(reference, reference.path.parent, port, events, loopback_callbacks)
    else:
        server.serve(reference)
