"""The snapshot page as operators use it: Chromium (driven by Playwright) against the real
Airflow services of the scheduler tests (api-server, scheduler, dag-processor, Spark).

Users sign in through Airflow's login form (SimpleAuthManager). The DAG's bundle belongs
to team ``enrichment`` (multi-team mode), so access follows Airflow's own rules: ``admin``
may do anything, ``viewer`` (team ``enrichment``) may read but not edit, ``outsider`` (an
op of team ``others``) may not see the DAG at all.

Every wait is for a state a user would see, with a generous bound for a busy machine.
Screenshots of the page during a run and after an interruption go to ``tmp/artifacts/``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from urllib.parse import quote

import pytest

from demo.users import Users
from enrichment_airflow.urls import page_url
from enrichment_airflow.web.page import POLL_MS
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

from .airflow_support import (
    DAG,
    OUTAGE,
    ROWS,
    airflow_stack,
    assert_run_succeeds,
    fail_first_try_by_outage,
    namespace,
    summary_of,
    trigger,
    write_day,
)
from .browser_support import ARTIFACTS, launch_chromium, sync_api
from .test_plugin_web import _write_namespace, ten_thousand_partitions

expect = sync_api.expect

# The page at three widths in a browser stays in the suite (test_snapshot_page_layout.py).
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.extended]

#: Bound of a wait that needs Spark or the scheduler (a busy machine is slow, not broken).
SLOW_MS = 300_000
#: How long a page is given to show a state before it is reloaded (Airflow's UI renders
#: in several seconds on a loaded machine).
RELOAD_MS = 20_000
# Every assertion waits as a user of a busy machine would (Playwright's default is 5 s).
expect.set_options(timeout=RELOAD_MS)

DAG_TEAM = "enrichment"
USERS = Users(
    {
        "admin": ("admin", "admin-pw"),
        "viewer": ("viewer", "viewer-pw"),
        "outsider": ("op", "outsider-pw"),
    },
    teams={"viewer": DAG_TEAM, "outsider": "others"},
)
TEAM_ENV = {
    "AIRFLOW__CORE__MULTI_TEAM": "True",
    "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
        [
            {
                "name": "dags-folder",
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {},
                "team_name": DAG_TEAM,
            }
        ]
    ),
}
SETUP = (("teams", "sync"), ("teams", "create", "others"))


@pytest.fixture(scope="module")
def chromium():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def stack(chromium, tmp_path_factory):
    """One Airflow for every check here (the browser first: no browser, no Airflow)."""
    tmp = tmp_path_factory.mktemp("browser")
    with airflow_stack(tmp, USERS, SETUP, **TEAM_ENV) as running:
        yield running


@pytest.fixture
def signed_in(chromium, stack) -> Iterator[Callable]:
    """``signed_in(user)``: a page of a fresh browser context, signed in through the form."""
    _, services, _ = stack
    contexts = []

    def sign_in(user: str):
        context = chromium.new_context(
            base_url=services.url, viewport={"width": 1400, "height": 900}
        )
        contexts.append(context)
        context.set_default_timeout(60_000)
        page = context.new_page()
        page.goto("/")
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(USERS.accounts[user][1])
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("button", name="Browse")).to_be_visible(timeout=60_000)
        return page

    yield sign_in
    for context in contexts:
        context.close()


def store_of(stack) -> SnapshotStore:
    return SnapshotStore(str(stack[2] / "snapshots"))


def reload_until(page, locator, timeout_ms: int = SLOW_MS) -> None:
    """Reload until ``locator`` is visible: for states the page does not poll for (a run
    that has not started yet), as a user presses F5."""
    deadline = time.monotonic() + timeout_ms / 1000
    while time.monotonic() < deadline:
        try:
            expect(locator.first).to_be_visible(timeout=RELOAD_MS)
            return
        except AssertionError:
            page.reload()
    expect(locator.first).to_be_visible(timeout=RELOAD_MS)


def spaced(number: int) -> str:
    """How the page writes counts: thin spaces between thousands."""
    return f"{number:,}".replace(",", "\u202f")


def total_cell(section):
    """The footer's done / total cell."""
    footer = section.get_by_role("row").filter(
        has=section.page.get_by_role("cell", name="total", exact=True)
    )
    return footer.get_by_role("cell").nth(1)


def namespace_section(page, key: NamespaceKey):
    heading = page.get_by_role("heading", name=re.compile(re.escape(key.interval_start)))
    return page.locator("section").filter(has=heading)


def assert_page_matches_manifests(section, store: SnapshotStore, key: NamespaceKey) -> None:
    """Per partition: done / total and its bar, as the manifests say."""
    parts = store.namespace_progress(key)
    assert parts, "the interrupted run left snapshots"
    for p in parts:
        row = section.get_by_role("row").filter(
            has=section.page.get_by_role("cell", name=f"part {p.partition}", exact=True)
        )
        cell = row.get_by_role("cell").nth(1)
        expect(cell).to_have_text(f"{spaced(p.done_rows)} / {spaced(p.records_total)}")
        percent = 100 * p.done_rows / p.records_total
        expect(cell.get_by_title(f"{percent:.1f} %")).to_be_visible()
    done = sum(p.done_rows for p in parts)
    expect(total_cell(section)).to_have_text(f"{spaced(done)} / {spaced(ROWS)}")


def test_browse_menu_opens_the_page_inside_airflow(signed_in):
    page = signed_in("admin")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Enrichment snapshots").click()
    expect(page).to_have_url(re.compile(r"/plugin/enrichment-snapshots\b"))
    page_in_airflow = page.frame_locator("iframe")
    expect(page_in_airflow.get_by_role("heading", name="Enrichment snapshots")).to_be_visible()
    expect(page_in_airflow.get_by_text("Signed in as admin")).to_be_visible()


def open_the_extra_link(page, task_page: str, key: NamespaceKey) -> None:
    """The task's *Snapshot progress* link (Details tab), published when the try starts,
    opens this run's namespace; it shows once the driver has written its job record."""
    page.goto(f"{task_page}/details")
    link = page.get_by_role("link", name="Snapshot progress")
    reload_until(page, link)
    link.click()
    expect(page).to_have_url(re.compile(re.escape(page_url(DAG, "enrich", key.interval_start))))
    reload_until(page, page.locator('section[data-running="true"]'))
    expect(page.locator("section")).to_have_count(1)


def watch_live_progress(page, key: NamespaceKey) -> None:
    """The counts grow without a reload, with a rate and an ETA."""
    section = namespace_section(page, key)
    total = total_cell(section)
    page.evaluate("window.notReloaded = true")
    before = total.inner_text()
    expect(total).not_to_have_text(before, timeout=SLOW_MS)
    # The driver's first progress record gives the total before any commit: wait for one.
    expect(total).not_to_have_text(re.compile(r"^0 / "), timeout=SLOW_MS)
    assert page.evaluate("window.notReloaded === true"), "the page reloaded itself"
    expect(section.get_by_text(re.compile(r"\d+ rec/s · ETA \d"))).to_be_visible()
    expect(section.get_by_text(re.compile(r"of 4 partitions reported"))).to_be_visible()


def interrupted_by_an_outage(stack, page, run_id: str, key: NamespaceKey) -> None:
    """The API breaks; the try fails and an operator marks it failed (no more retries).
    The page says interrupted, matches the manifests, and does not poll."""
    api, services, tmp = stack
    fail_first_try_by_outage(api, services, tmp, key.interval_start[:10], run_id)
    services.request(
        "PATCH",
        f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/enrich",
        {"new_state": "failed"},
    )
    services.wait_for(
        lambda: services.dag_run(DAG, run_id)["state"] == "failed", 300, "the run to fail"
    )
    page.goto(page_url(DAG, "enrich", key.interval_start))
    section = namespace_section(page, key)
    # (a try killed by "mark failed" leaves its lease to expire: the page polls till then)
    interrupted = section.get_by_role("cell", name=re.compile(r"^interrupted")).first
    expect(interrupted).to_be_visible(timeout=SLOW_MS)
    expect(page.locator("body")).to_have_attribute("data-polling", "stopped", timeout=30_000)
    assert_page_matches_manifests(section, store_of(stack), key)
    page.screenshot(path=ARTIFACTS / "snapshot-page-after-interruption.png", full_page=True)


def clear_in_airflow(page, task_page: str) -> None:
    page.goto(task_page)
    page.get_by_role("button", name=re.compile("to clear", re.IGNORECASE)).click()
    page.get_by_role("dialog").get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("dialog")).to_be_hidden()


def watch_the_retry_reach_the_total(page, key: NamespaceKey) -> None:
    """The page follows the resumed run to the total by itself, then stops polling (the
    retry may be done already when the page loads: then it shows the final count)."""
    page.goto(page_url(DAG, "enrich", key.interval_start))
    finished = page.get_by_text("completed: 12 000 of 12 000 records")
    reload_until(page, page.locator('section[data-running="true"]').or_(finished))
    total = total_cell(namespace_section(page, key))
    expect(total).to_have_text(f"{spaced(ROWS)} / {spaced(ROWS)}", timeout=SLOW_MS)
    expect(finished).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-polling", "stopped")
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url))
    page.wait_for_timeout(3 * POLL_MS)  # no state to wait for: checking that nothing happens
    assert polls == [], f"the page kept polling after the run finished: {polls}"


def test_an_operator_clears_a_run_failed_by_an_outage_and_watches_it_resume(stack, signed_in):
    api, services, tmp = stack
    day = "2024-05-01"
    key = namespace(day)
    write_day(tmp, day)
    # Slow enough to watch on a busy machine, and sure to break before the end: after
    # 5 000 calls the API is down until healed (the test may break it earlier).
    api.post("/faults", {"latency_ms": 500, **OUTAGE, "outage_after_requests": 5_000})
    run_id = trigger(services, day)
    task_page = f"/dags/{DAG}/runs/{quote(run_id)}/tasks/enrich"
    page = signed_in("admin")

    open_the_extra_link(page, task_page, key)
    watch_live_progress(page, key)
    # Progress in Airflow's own task view: its Storage tab (the "Task State Store").
    page.goto(f"{task_page}/task-state-store")
    reload_until(page, page.get_by_text(re.compile(r"[\d ]+ / 12 000 committed, epoch \d+")))
    # The page as Browse shows it, for docs/operating.md.
    page.goto("/plugin/enrichment-snapshots")
    expect(
        page.frame_locator("iframe").get_by_text(re.compile(r"\d+ rec/s · ETA \d"))
    ).to_be_visible()
    page.screenshot(path=ARTIFACTS / "snapshot-page-during-run.png")

    interrupted_by_an_outage(stack, page, run_id, key)
    api.heal()
    clear_in_airflow(page, task_page)
    watch_the_retry_reach_the_total(page, key)

    assert_run_succeeds(services, run_id)
    summary = summary_of(services, run_id)
    assert summary["resumed"] is True and summary["enriched"] + summary["dead_letters"] == ROWS
    page.goto(task_page)
    page.get_by_placeholder("Search logs").fill("resuming epoch")
    # The operator's plan and the job's own decision both say it: either will do.
    resuming = page.get_by_text(re.compile(r"resuming epoch \d+: [\d ]+ of 12 000")).first
    expect(resuming).to_be_visible()
    # The Storage tab loads its pairs after the page: on a busy machine that takes a while.
    page.goto(f"{task_page}/task-state-store")
    dead = f"{summary['dead_letters']:,}".replace(",", " ")
    published = f"12 000 / 12 000 done ({dead} dead letters), output published"
    reload_until(page, page.get_by_text(published))


def test_discard_asks_for_confirmation_then_removes_the_namespace(stack, signed_in):
    store, key = store_of(stack), NamespaceKey(DAG, "enrich", "2024-06-01T00:00:00+00:00")
    _write_namespace(store, key)
    page = signed_in("admin")
    page.goto(page_url(key.dag_id, key.task_id, key.interval_start))
    discard = namespace_section(page, key).get_by_role("button", name="Discard")

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    discard.click()
    expect(discard).to_be_enabled()
    assert asked and key.interval_start in asked[0] and "starts from scratch" in asked[0]
    assert store.partitions(key), "a dismissed confirmation discards nothing"

    page.once("dialog", lambda dialog: dialog.accept())
    discard.click()
    expect(
        page.get_by_text("No snapshot namespaces you may read match this filter.")
    ).to_be_visible()
    assert not store.partitions(key)


def test_a_viewer_cannot_discard(stack, signed_in):
    store, key = store_of(stack), NamespaceKey(DAG, "enrich", "2024-06-02T00:00:00+00:00")
    _write_namespace(store, key)
    page = signed_in("viewer")
    page.goto(page_url(key.dag_id, key.task_id, key.interval_start))
    section = namespace_section(page, key)
    expect(section.get_by_role("cell", name="part 0", exact=True)).to_be_visible()
    expect(section.get_by_role("button", name="Discard")).to_have_count(0)
    path = "/".join(quote(part, safe="") for part in (key.dag_id, key.task_id, key.interval_start))
    forced = page.request.post(f"/enrichment/api/namespaces/{path}/discard")  # the cookie
    assert forced.status == 403, forced.text()
    assert store.partitions(key), "nothing discarded"


def test_a_user_without_access_to_the_dag_sees_none_of_its_namespaces(stack, signed_in):
    store, key = store_of(stack), NamespaceKey(DAG, "enrich", "2024-06-03T00:00:00+00:00")
    _write_namespace(store, key)
    page = signed_in("outsider")
    page.goto("/enrichment/")
    expect(page.get_by_text("Signed in as outsider")).to_be_visible()
    expect(
        page.get_by_text("No snapshot namespaces you may read match this filter.")
    ).to_be_visible()
    assert page.request.get("/enrichment/api/namespaces").json() == []
    page.goto(page_url(key.dag_id))
    expect(page.get_by_role("heading", name="Access denied")).to_be_visible()


def test_a_viewer_pages_through_ten_thousand_partitions(stack, signed_in):
    store, key = store_of(stack), NamespaceKey(DAG, "enrich", "2024-06-04T00:00:00+00:00")
    store.write_progress_record(key, ten_thousand_partitions())
    page = signed_in("viewer")
    page.goto(page_url(key.dag_id, key.task_id, key.interval_start))
    section = namespace_section(page, key)
    pager = section.locator(".pager")
    expect(pager).to_contain_text(f"partitions 1–100 of {spaced(10_000)}")
    expect(section.get_by_role("cell", name="part 99", exact=True)).to_be_visible()
    expect(pager.get_by_role("button", name="‹ previous")).to_be_disabled()
    pager.get_by_role("button", name="next ›").click()
    expect(pager).to_contain_text(f"partitions 101–200 of {spaced(10_000)}")
    expect(section.get_by_role("cell", name="part 100", exact=True)).to_be_visible()
    expect(section.get_by_role("cell", name="part 0", exact=True)).to_have_count(0)
    pager.get_by_role("button", name="‹ previous").click()
    expect(section.get_by_role("cell", name="part 0", exact=True)).to_be_visible()
    expect(total_cell(section)).to_have_text(
        re.compile(rf"{spaced(10_000 * 8_012)} / {spaced(1_000_000_000)}")
    )
