"""The snapshot page at a glance, in Chromium at 1 920, 1 280 and 390 px wide: no cell
clipped, every partition of the job listed (the ones without a commit as pending), a run
stopped (SIGSTOP, as a hung driver looks) recognised as stalled before its lease expires,
and, once killed, as interrupted at once: its driver ran on the page's own host.

One real run (Spark ``local[2]``, 4 partitions against the demo API on loopback) is watched
by three pages at once, served by a real ``airflow api-server`` (the plugin registered by
its entry point; signed in through Airflow's login form). The two wide pages show it where
users open it, inside Airflow (Browse → Enrichment snapshots: an iframe beside Airflow's
navigation); the narrow one opens the page itself, as a phone would, in its stacked form.
Every wait is for what a user would see. The screenshots in ``docs/`` come from here
(``tmp/artifacts/``; ``KEEP_SCREENSHOTS=docs`` writes them there).
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from demo.stack import AirflowServices, airflow_env, demo_api
from demo.users import Users
from enrichment_airflow.progress_reporter import progress_line
from enrichment_airflow.urls import page_url
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.lease import Lease

from .airflow_support import init_airflow
from .browser_support import ARTIFACTS, ROOT, launch_chromium, sync_api
from .job_support import job_args, kill_group, start_job, write_input

expect = sync_api.expect

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

KEY = NamespaceKey("enrich_customers", "enrich", "2024-05-01T00:00:00+00:00")
PARTITIONS = 4  # two run at once on local[2]: two are pending at first
ROWS = 4_000  # 100 s per partition at 2 in flight and 200 ms a call: killed well before
#: The run's lease: renewed every 30 s, so silent for more than 60 s is stalled, and
#: expired after 90 s; killed between the two, the page says interrupted before that.
LEASE_TTL_S = 90
WIDTHS = {"wide": 1920, "laptop": 1280, "phone": 390}
USERS = Users({"admin": ("admin", "admin-pw")})
#: Bound of a wait that needs Spark or Airflow on a busy machine.
SLOW_MS = 300_000
STALLED = re.compile(r"^no progress for \d+ s$")

# Each element whose content is wider than its box (clipped, or scrolled sideways): the
# cells, the table's scroll box, the section and the document itself.
CLIPPED = """(elements) => elements
  .filter((el) => el.getClientRects().length > 0 && el.scrollWidth > el.clientWidth)
  .map((el) => `${el.tagName.toLowerCase()} ${el.dataset.label || el.className}: `
    + `${el.scrollWidth} > ${el.clientWidth} px: ${el.textContent.trim().slice(0, 60)}`)"""


class ApiServerOnly(AirflowServices):
    """Airflow's api-server alone: the UI and the plugin's page; no DAG is scheduled."""

    def commands(self) -> list[tuple[str, list[str]]]:
        return [entry for entry in super().commands() if entry[0] == "api-server"]


@pytest.fixture(scope="module")
def chromium():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def airflow(chromium, tmp_path_factory):
    """(api-server, demo API, tmp): the browser first, so no browser means no Airflow."""
    tmp = tmp_path_factory.mktemp("layout")
    with demo_api("--latency-ms", "200") as api:
        env = airflow_env(tmp / "home", api.url, tmp / "data", tmp / "snapshots")
        init_airflow(env)
        services = ApiServerOnly(env, tmp / "home", USERS)
        try:
            services.start()
            yield services, api, tmp
        except BaseException:
            print(services.logs())
            raise
        finally:
            services.stop()


def signed_in_pages(chromium, services) -> tuple[object, dict[str, object]]:
    """One browser context signed in through Airflow's form; a page per width."""
    context = chromium.new_context(base_url=services.url, viewport={"width": 1920, "height": 1000})
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto("/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(USERS.accounts["admin"][1])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Browse")).to_be_visible(timeout=SLOW_MS)
    page.close()
    pages = {}
    for name, width in WIDTHS.items():
        pages[name] = context.new_page()
        pages[name].set_viewport_size({"width": width, "height": 1000 if width > 800 else 900})
    return context, pages


def the_page(page, name: str):
    """Where the snapshot page is: inside Airflow's iframe on the wide pages, the page
    itself on the phone."""
    return page.frame_locator("iframe") if name != "phone" else page


def open_the_page(page, name: str):
    """The page at this width, and the run's section on it."""
    if name == "phone":
        page.goto(page_url(KEY.dag_id, KEY.task_id, KEY.interval_start))
    else:
        page.goto("/plugin/enrichment-snapshots")
    shown = the_page(page, name)
    expect(shown.get_by_role("heading", name="Enrichment snapshots")).to_be_visible(timeout=SLOW_MS)
    return shown, shown.locator("section").filter(has_text=KEY.interval_start)


def assert_nothing_clipped(shown, name: str) -> None:
    """No cell's content is wider than its box, and neither the table nor the page scrolls
    sideways."""
    checked = shown.locator("html, section, .scroll, table, td, th")
    clipped = checked.evaluate_all(CLIPPED)
    assert clipped == [], f"{name} ({WIDTHS[name]} px): {clipped}"
    assert checked.count() > 9 * PARTITIONS, "the table is there"


def state_cell(section, partition: int):
    """The state of ``part <partition>`` (rows are in partition order)."""
    return section.locator("tbody tr").nth(partition).locator('td[data-label="State"]')


def wait_for_commits(store: SnapshotStore, job) -> None:
    """Until the driver's progress record has a commit (the page then has rows to show)."""
    deadline = time.monotonic() + SLOW_MS / 1000
    while True:
        record = store.progress_record(KEY)
        if record is not None and record.partitions:
            return
        assert job.poll() is None, job.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no commit from the run"
        time.sleep(0.2)


def screenshot(page, file: str, full_page: bool = False) -> None:
    page.screenshot(path=ARTIFACTS / file, full_page=full_page)
    if os.environ.get("KEEP_SCREENSHOTS") == "docs":
        page.screenshot(path=ROOT / "docs" / file, full_page=full_page)


def test_the_page_fits_three_widths_lists_every_partition_and_tells_a_killed_run(
    chromium, airflow
) -> None:
    services, api, tmp = airflow
    store = SnapshotStore(str(tmp / "snapshots"))
    job = start_job(job_spec(tmp, api.url), env={"SPARK_MASTER": "local[2]"})
    try:
        shown, context, pages = watch_the_running_job(chromium, services, store, job)
        os.killpg(job.pid, signal.SIGSTOP)  # alive but silent, as a hung driver is
        lease = the_pages_say_stalled(shown, pages, store)
        kill_group(job)  # SIGKILL to the driver's group: JVM and Python workers
        # The driver ran on this host: its lease is not in force once it is gone.
        expect(state_cell(shown["wide"][1], 0)).to_have_text("interrupted", timeout=SLOW_MS)
        assert time.time() < lease.expires_at, "interrupted before the lease's expiry"
        context.close()
    finally:
        if job.poll() is None:
            kill_group(job)


def job_spec(tmp, api_url: str) -> list[str]:
    """The job: 4 partitions of ``ROWS`` rows, 2 at a time, with watermarks."""
    write_input(tmp / "in" / "part.jsonl", [f"customer-{i}" for i in range(ROWS)])
    args = job_args(tmp, api_url, "--partitions", str(PARTITIONS), "--capacity", "2")
    args += ["--event-time-column", "event_time"]  # watermarks: the widest cells
    args += ["--dag-id", KEY.dag_id, "--task-id", KEY.task_id]
    return [*args, "--interval-start", KEY.interval_start, "--lease-ttl", str(LEASE_TTL_S)]


def watch_the_running_job(chromium, services, store: SnapshotStore, job):
    """Three pages on the running job: every partition listed, nothing clipped; the
    pages by name, with the browser context that holds them."""
    wait_for_commits(store, job)
    context, pages = signed_in_pages(chromium, services)
    shown = {name: open_the_page(page, name) for name, page in pages.items()}
    for name, (frame, section) in shown.items():
        # Every partition of the job, the two not started yet as pending.
        names = section.locator('tbody td[data-label="Partition"]')
        expect(names).to_have_text([f"part {n}" for n in range(PARTITIONS)])
        expect(state_cell(section, 3)).to_have_text("pending")
        expect(state_cell(section, 0)).to_have_text("running")
        expect(section.get_by_text(re.compile(r"\d+ rec/s · ETA \d"))).to_be_visible(
            timeout=SLOW_MS
        )
        assert_nothing_clipped(frame, name)
    screenshot(pages["laptop"], "snapshot-page.png")
    screenshot(pages["phone"], "snapshot-page-phone.png", full_page=True)
    return shown, context, pages


def the_pages_say_stalled(shown, pages, store: SnapshotStore) -> Lease:
    """The stopped run's lease stays in force for up to a TTL; the pages poll by themselves
    and say that the run went silent before it expires; the Storage tab's line says the
    same. Returns the lease."""
    seen = []
    for name, (frame, section) in shown.items():
        expect(section.locator(".pace.stalled")).to_have_text(STALLED, timeout=SLOW_MS)
        seen.append(time.time())
        expect(state_cell(section, 0)).to_have_text("stalled")
        expect(state_cell(section, 0).locator("span")).to_have_attribute(
            "title", re.compile(r"^no progress for \d+ s: ")
        )
        expect(state_cell(section, 3)).to_have_text("pending")
        assert_nothing_clipped(frame, name)
        if name == "laptop":
            screenshot(pages[name], "snapshot-page-stalled.png")
            line = progress_line(store, KEY)
            assert line and re.search(r" in flight; no progress for \d+ s$", line), line
    lease = store.lease(KEY, owner="").read()
    assert lease is not None and max(seen) < lease.expires_at, "stalled before the expiry"
    return lease
