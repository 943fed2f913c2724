"""``python -m bench``: measure signoff against plain Huey on this machine, in one run."""

import json

import click


class ProcessCounts(click.ParamType):
    """A comma-separated list of worker-process counts, e.g. ``1,2,4``."""

    name = "counts"

    def convert(self, value, param, ctx):
        if isinstance(value, (list, tuple)):
            return value
        try:
            counts = [int(part) for part in value.split(",")]
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of numbers", param, ctx)
        if not counts or min(counts) < 1 or max(counts) > 64 or len(set(counts)) != len(counts):
            self.fail(f"{value!r}: each count must be 1 to 64, each once", param, ctx)
        return counts


class BackendUrl(click.ParamType):
    """A database or queue URL of one of ``kinds`` (see ``backends.kind_of``)."""

    name = "url"

    def __init__(self, *kinds):
        self.kinds = kinds

    def convert(self, value, param, ctx):
        from .backends import kind_of
        try:
            ok = kind_of(value) in self.kinds
        except ValueError:
            ok = False
        if not ok:
            self.fail(f"unsupported url {value!r} (wanted {' or '.join(self.kinds)})", param, ctx)
        return value


@click.command()
@click.option("--events", "n_events", type=click.IntRange(min=1), default=2000, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Threads per worker process.")
@click.option("--processes", type=ProcessCounts(), default="1", show_default=True,
              help="Worker-process counts to measure, e.g. 1,2,4.")
@click.option("--database-url", type=BackendUrl("postgresql"), default=None, help="PostgreSQL server for the state "
              "(a database is created for the run and dropped after it); default SQLite.")
@click.option("--queue-url", type=BackendUrl("redis", "postgresql"), default=None, help="Redis or PostgreSQL server for the queue "
              "(a queue name of its own per run); default SQLite.")
@click.option("--growth", is_flag=True, help="Also measure ingest with finished tasks present.")
@click.option("--growth-rows", type=click.IntRange(min=1000), default=100_000, show_default=True,
              help="Finished tasks present for --growth.")
@click.option("--one-write-host", is_flag=True,
              help="signoff's homes write each result as a host commit of its own (no batch "
              "write), as plain Huey's job does.")
@click.option("--mcp", "over_mcp", is_flag=True,
              help="Instead: the host in-process against the host over MCP (in this process).")
@click.option("--http", is_flag=True, help="Instead: `signoff serve` webhook ingest against a bare endpoint.")
@click.option("--tracing", "traced", is_flag=True,
              help="Instead: event → ready with OpenTelemetry tracing off and on (in this process).")
@click.option("--concurrent", is_flag=True,
              help="Instead: 8 concurrent API callers (one event a call) against one batch call, "
              "2 worker processes, enqueue → done; and one sequential caller against bare commits.")
@click.option("--pairs", type=click.IntRange(min=1), default=3, show_default=True,
              help="With --concurrent: how many (batch, concurrent) pairs and sequential rounds "
              "to run; the median is reported. More pairs decide a ratio a noisy machine blurs.")
@click.option("--latency", is_flag=True,
              help="Instead: event → ready and approve → done, one API call at a time, with an "
              "idle worker and at half of capacity, against plain Huey's no-op enqueue → run.")
@click.option("--cli", "through_cli", is_flag=True,
              help="Instead: ingest through the CLI (enqueue, worker --drain) against plain Huey "
              "producer and consumer processes, process start included; and the start-up alone. With "
              "--database-url: also on those servers with max(--processes) worker processes.")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=None,
              help="With --cli: the signoff home's [worker] batch_size (default: signoff's).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def bench(n_events, workers, processes, database_url, queue_url, growth, growth_rows,
          one_write_host, over_mcp, http, traced, concurrent, pairs, latency, through_cli,
          batch_size, as_json):
    """Measure signoff against plain Huey on this machine, in one run.

    The homes it makes are its own: their backends are the flags' (SQLite by
    default), whatever SIGNOFF_DATABASE_URL and SIGNOFF_QUEUE_URL say.
    """
    from click.core import ParameterSource
    given = click.get_current_context().get_parameter_source("n_events") != ParameterSource.DEFAULT
    if through_cli:
        from .cli import run_cli_bench
        from .backends import BenchBackend
        backend = (BenchBackend(database_url=database_url, queue_url=queue_url or database_url)
                   if database_url else None)
        try:
            report = run_cli_bench(n_events if given else 10_000, as_json, batch_size, backend,
                                   max(processes))
        finally:
            if backend is not None:
                backend.close()
        if as_json:
            click.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    if batch_size is not None:
        raise click.UsageError("--batch-size goes with --cli")
    if http:
        from .webhooks import EVENTS, run_http_bench
        report = run_http_bench(events=n_events if given else EVENTS, as_json=as_json,
                                database_url=database_url, queue_url=queue_url)
        if as_json:
            click.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    from .pipeline import run_bench
    if latency:
        from .latency import run_latency_bench
        report = run_latency_bench(database_url, queue_url, as_json)
    elif concurrent:
        from .callers import run_concurrent_bench
        report = run_concurrent_bench(n_events, workers, database_url, queue_url, as_json,
                                      pairs=pairs)
    elif traced:
        from .tracing import run_tracing_bench
        report = run_tracing_bench(n_events, as_json)
    elif over_mcp:
        from .mcp import run_mcp_bench
        report = run_mcp_bench(n_events, as_json)
    else:
        report = run_bench(n_events=n_events, workers=workers, growth=growth, as_json=as_json,
                           processes=processes, database_url=database_url, queue_url=queue_url,
                           growth_rows=growth_rows, one_write_host=one_write_host)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    bench(prog_name="python -m bench")
