"""The dashboard in headless Chromium: the runs page, megatron_offset's run page with its
coverage heatmap and finding (clicking it zooms the figure), comparing two runs, the nodes page,
escaping of a hostile run name, and no console errors anywhere."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import ARTIFACTS, Served, problems

pytestmark = pytest.mark.integration

FIGURE = "#run-figure .js-plotly-plot"


def traces(page: Page, selector: str) -> list[dict[str, Any]]:
    return page.eval_on_selector(
        selector, "el => el.data.map(t => ({type: t.type, name: t.name, n: (t.x || []).length}))"
    )


def x_range(page: Page) -> list[float]:
    return page.eval_on_selector(FIGURE, "el => el._fullLayout.xaxis.range.slice()")


def test_runs_page_lists_runs_and_links_to_them(served: Served, page: Page) -> None:
    page.goto(served.base + "/")
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    table = page.locator("#runs-table")
    expect(table.get_by_role("link", name="megatron_offset")).to_be_visible()
    expect(table.locator(".badge-fail").first).to_be_visible()
    expect(page.locator("#runs-range")).to_have_text(re.compile(r"1-5 of 5"))
    page.locator("#runs-search input, input#runs-search").fill("stall")
    page.keyboard.press("Enter")
    expect(page.locator("#runs-range")).to_have_text(re.compile(r"1-1 of 1"))
    expect(table.get_by_role("link", name="stall_on_save")).to_be_visible()
    assert problems(page) == []


def test_megatron_offset_page_shows_heatmap_and_finding_and_zooms(
    served: Served, page: Page
) -> None:
    page.goto(served.base + "/")
    page.locator("#runs-table").get_by_role("link", name="megatron_offset").click()
    expect(page.locator("#run-name")).to_have_text("megatron_offset")
    page.wait_for_selector(FIGURE)
    kinds = traces(page, FIGURE)
    assert {"type": "heatmap", "name": "coverage"} in [
        {"type": t["type"], "name": t["name"]} for t in kinds
    ], kinds
    finding = page.locator(".finding-resume_data_drift")
    expect(finding).to_contain_text("Resume from step 300 re-applied its resume offset")
    expect(finding).to_contain_text("Repair: Resume from checkpoint step_000300")
    before = x_range(page)
    finding.click()
    page.wait_for_function(
        f"() => {{ const r = document.querySelector('{FIGURE}')._fullLayout.xaxis.range;"
        f" return r[1] - r[0] < {before[1] - before[0]} * 0.9; }}"
    )
    after = x_range(page)
    assert after[0] < 301 < after[1] and after[1] - after[0] < before[1] - before[0]
    expect(page.get_by_role("cell", name="step_000300", exact=True)).to_be_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(page.url)  # unzoomed, for the screenshot
    page.wait_for_selector(FIGURE)
    page.screenshot(path=str(ARTIFACTS / "run-megatron_offset.png"), full_page=True)
    assert problems(page) == []


def test_stall_on_save_page_screenshot(served: Served, page: Page) -> None:
    page.goto(served.base + "/")
    page.locator("#runs-table").get_by_role("link", name="stall_on_save").click()
    expect(page.locator(".finding-checkpoint_loss_spike").first).to_be_visible()
    page.wait_for_selector(FIGURE)
    page.screenshot(path=str(ARTIFACTS / "run-stall_on_save.png"), full_page=True)
    assert problems(page) == []


def test_compare_two_runs_on_one_axis(served: Served, page: Page) -> None:
    runs = httpx.get(
        f"{served.base}/api/v1/runs",
        params={"project": "examples"},
        headers={"Authorization": f"Bearer {served.token}"},
    ).json()["items"]
    ids = {r["name"]: r["id"] for r in runs}
    chosen = f"{ids['megatron_offset']},{ids['exact_resume']}"
    page.goto(f"{served.base}/compare?runs={chosen}")  # a shareable link to a comparison
    expect(page.locator("#compare-runs")).to_contain_text("examples/megatron_offset")
    page.wait_for_function(
        "() => { const g = document.querySelector('#compare-figure .js-plotly-plot');"
        " return g && g.data && g.data.filter("
        "t => t.type === 'scatter' && (t.mode || '').includes('lines')).length >= 2; }",
        timeout=60_000,
    )
    names = {t["name"] for t in traces(page, "#compare-figure .js-plotly-plot")}
    assert {"megatron_offset", "exact_resume"} <= names, names
    page.locator("#compare-metric").click()
    page.get_by_text("lr", exact=True).last.click()
    page.wait_for_function(
        "() => document.querySelector('#compare-figure .js-plotly-plot')"
        ".layout.yaxis.title.text === 'lr'",
        timeout=60_000,
    )
    assert problems(page) == []


def test_a_hostile_run_name_renders_as_text(served: Served, page: Page) -> None:
    page.goto(served.base + "/")
    link = page.locator("#runs-table").get_by_role("link", name="<img src=x onerror=alert(1)>")
    expect(link).to_be_visible()
    assert page.locator("#runs-table img").count() == 0
    link.click()
    expect(page.locator("#run-name")).to_have_text("<img src=x onerror=alert(1)>")
    page.wait_for_selector(FIGURE)
    assert page.locator("img[src='x']").count() == 0
    assert problems(page) == []  # no alert dialog, no script error


def test_nodes_page_without_nodes(served: Served, page: Page) -> None:
    page.goto(served.base + "/nodes")
    expect(page.get_by_text("No nodes yet")).to_be_visible()
    assert problems(page) == []


def test_logging_in_through_the_form(served: Served, browser: Browser) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.goto(served.base + "/compare")  # not logged in: the login form, then back here
        expect(tab.get_by_label("API token")).to_be_visible()
        tab.get_by_label("API token").fill("rwt_not-a-token")
        tab.get_by_role("button", name="Log in").click()
        expect(tab.get_by_role("alert")).to_contain_text("not valid")
        tab.get_by_label("API token").fill(served.token)
        tab.get_by_role("button", name="Log in").click()
        expect(tab.get_by_role("heading", name="Compare runs")).to_be_visible()
        assert tab.url == served.base + "/compare"
        cookie = next(c for c in context.cookies() if c["name"] == "runwatch_token")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
        tab.goto(served.base + "/logout")
        expect(tab.get_by_label("API token")).to_be_visible()
    finally:
        context.close()
