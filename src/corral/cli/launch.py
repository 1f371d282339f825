"""``corral launch FILE``: submit a run and follow it until it ends."""

from __future__ import annotations

from pathlib import Path

import typer


def launch(
    file: Path = typer.Argument(..., help="The job spec (corral.yaml)."),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a spec field: key.path=value (repeatable)."
    ),
    detach: bool = typer.Option(False, "--detach", "-d", help="Submit and return at once."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the end without streaming logs."),
    json_: bool = typer.Option(
        False, "--json", help="Print the run as JSON (the final run with --wait)."
    ),
) -> None:
    """Launch a run. Streams stage logs with a live status line until the run ends; Ctrl-C
    detaches (the run goes on). Exit code 0 if the run SUCCEEDED, 1 if it ended otherwise."""
    from corral.cli.output import console, err_console, print_json, run_dict
    from corral.control import launching, planner
    from corral.control.context import Context
    from corral.control.daemon import start_background
    from corral.control.providers import load_providers
    from corral.errors import EXIT_INTERRUPTED, EXIT_RUN_NOT_SUCCEEDED, InfeasibleRequest
    from corral.spec import load_spec, spec_hash
    from corral.store import Store

    spec = load_spec(file, list(set_))
    if not Path(spec.workdir).is_dir():
        from corral.errors import BadInput

        raise BadInput(f"{file}: workdir {spec.workdir} does not exist or is not a directory")
    if spec.secrets:  # every secret must resolve before anything is created or launched
        from corral.secrets import resolve_many

        resolve_many(spec.secrets)
    providers, skipped = load_providers()
    result = planner.plan(providers, planner.requirements_from_spec(spec))
    for name, why in skipped.items():
        result.rejected.setdefault(name, why)
    if not result.offers:
        raise InfeasibleRequest(f"no provider can run {file}: {result.explain() or 'none enabled'}")

    _warn_if_over_budget(spec, result.available or result.offers)

    store = Store.open()
    run = store.create_run(
        name=spec.name,
        spec=spec.model_dump(mode="json"),
        spec_hash=spec_hash(spec),
        spec_path=str(Path(file).resolve()),
        workdir=str(spec.workdir),
    )
    # launch the first attempt here (the fast path to the first line of user code), then make
    # sure a controller babysits it; the compare-and-set in start_attempt means the two never
    # both launch it
    launching.start_attempt(Context(store=store, providers=providers), run)
    start_background(wait_s=0, notify=lambda m: err_console.print(f"[dim]{m}[/]"))

    if detach or (json_ and not wait):
        run = store.get_run(run.id)
        if json_:
            print_json(run_dict(run))
        else:
            console.print(
                f"launched [bold]{run.id}[/] ({run.state})\n"
                f"  follow: corral logs -f {run.id}\n  status: corral status {run.id}"
            )
        return
    try:
        if wait:
            from corral.cli.waiting import wait_for_end

            run = wait_for_end(store, run.id)
        else:
            from corral.cli.follow import follow

            err_console.print(f"[dim]run {run.id} (Ctrl-C detaches; the run goes on)[/]")
            run = follow(store, run.id)
    except KeyboardInterrupt:
        err_console.print(
            f"\ndetached from {run.id}; it keeps running.\n"
            f"  re-attach: corral logs -f {run.id}\n  status:    corral status {run.id}\n"
            f"  stop:      corral stop {run.id}"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if json_:
        print_json(run_dict(run))
    else:
        from corral.cli.status import print_summary

        print_summary(store, run)
    if run.state != "SUCCEEDED":
        raise typer.Exit(EXIT_RUN_NOT_SUCCEEDED)


def _warn_if_over_budget(spec: object, offers: list) -> None:
    """Warn (not refuse) when the cheapest offer for the whole max_runtime exceeds the budget."""
    from corral.cli.output import err_console, fmt_cost

    cap = spec.budget.max_cost_usd  # type: ignore[attr-defined]
    hours = (spec.limits.max_runtime or 0) / 3600.0  # type: ignore[attr-defined]
    if not cap or not hours or not offers:
        return
    price = offers[0].price_per_hour
    worst = price * hours
    if worst > cap:
        err_console.print(
            f"[yellow]warning:[/] {offers[0].provider} at {fmt_cost(price)}/h for the full "
            f"max_runtime ({hours:g} h) costs {fmt_cost(worst)}, more than the "
            f"{fmt_cost(cap)} budget: the run will be stopped at the budget "
            f"(after {cap / price:.1f} h)"
            if price
            else ""
        )
