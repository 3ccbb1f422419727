"""The documentation site: ``mkdocs build --strict`` from the committed pages and the
machine pages the ``machines`` plugin makes from ``spec/`` as it builds (in CI, the build
``.ci/run`` made, named by ``$MACHINES_TEST_SITE``), then the built site served on
localhost and opened in a real headless Chromium: every machine page loads and draws its
SVG diagram with a non-zero size, and no link or image is broken. A screenshot of the
effect page is kept under ``build/`` (CI's artifact).

Locally, a missing mkdocs, Chromium or chromedriver skips these tests (one line of the summary);
in CI (``CI=true``) it fails them, because ``.ci/run`` installs all three."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urlparse

import pytest

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parent.parent
MACHINES = ("effect", "outcome", "node", "request")
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = ("/usr/bin/chromedriver",)
SCREENSHOT = ROOT / "build" / "screenshots" / "effect.png"


def first_existing(paths: tuple[str, ...], what: str, fix: str) -> str:
    found = next((p for p in paths if Path(p).exists()), None)
    if found is None:
        unavailable(what, fix)
    return found


SITE_VARIABLE = "MACHINES_TEST_SITE"
"""The site ``.ci/run`` built with ``mkdocs build --strict`` just before the tests: built
once per run, not again here."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(SITE_VARIABLE)
    if given:
        built = Path(given)
        assert (built / "index.html").is_file(), f"${SITE_VARIABLE}={given} holds no site"
        return built
    if importlib.util.find_spec("mkdocs") is None:
        unavailable("mkdocs", "pip install 'effect-machines[docs]'")
    if not entry_points(group="mkdocs.plugins", name="machines"):
        unavailable("the machines mkdocs plugin's entry point", "pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("site")
    config = str(ROOT / "mkdocs.yml")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config, "-d", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def chromium(folder: Path, size: str = "1400,1600") -> Any:
    """A headless Chromium driven by chromedriver, its profile in ``folder`` (the site's
    test and the desk's browser tests share it)."""
    chromium_path = first_existing(CHROMIUM, "Chromium", "apt-get install chromium")
    driver_path = first_existing(CHROMEDRIVER, "chromedriver", "apt-get install chromium-driver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ModuleNotFoundError:
        unavailable("Selenium", "pip install 'effect-machines[docs]'")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_path
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={size}",
        f"--user-data-dir={folder}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = chromium(tmp_path_factory.mktemp("chromium"))
    yield driver
    driver.quit()


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in ("index", "invariants", "cli", "api", "guide/site"):
        assert (site / f"{page}.html").is_file(), page
    for name in (*MACHINES, "findings", "rules"):
        assert (site / "machines" / f"{name}.html").is_file(), name
    for name in MACHINES:
        assert (site / "machines" / "diagrams" / f"{name}.svg").is_file()
    assert not (ROOT / "docs" / "machines").exists(), "machine pages are made, not committed"
    for page in (ROOT / "docs").rglob("*.md"):
        html = page.relative_to(ROOT / "docs").with_suffix(".html")
        assert (site / html).is_file(), f"{html} is missing: the site is not this checkout's"


def test_every_machine_page_draws_its_diagram(browser: Any, server: str) -> None:
    for name in MACHINES:
        browser.get(f"{server}/machines/{name}.html")
        assert name in browser.title
        size = browser.execute_script(
            "const img = document.querySelector(`img[src$='${arguments[0]}.svg']`);"
            "if (!img || !img.complete) return null;"
            "const box = img.getBoundingClientRect();"
            "return [img.naturalWidth, img.naturalHeight, box.width, box.height];",
            name,
        )
        assert size is not None, f"{name}: no loaded diagram"
        assert all(v > 0 for v in size), f"{name}: diagram drawn at {size}"
        natural_width, _, shown_width, _ = size
        assert shown_width >= 0.99 * natural_width, (
            f"{name}: diagram shrunk to {shown_width / natural_width:.0%}: its labels would "
            "be a few pixels high"
        )
    browser.get(f"{server}/machines/request.html")
    scroll = browser.execute_script(
        "const p = document.querySelector(`img[src$='request.svg']`).closest('p');"
        "return [p.scrollWidth, p.clientWidth, getComputedStyle(p).overflowX];"
    )
    assert scroll[0] > scroll[1] and scroll[2] == "auto", scroll  # wider than the page: scrolled
    browser.get(f"{server}/machines/effect.html")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 10_000


def test_no_link_or_image_on_the_site_is_broken(browser: Any, server: str) -> None:
    """Crawl every page reachable from the home page; every same-site link must answer
    200 and every image must have loaded. Nothing is fetched from another host."""
    queue, seen, checked, broken = [f"{server}/index.html"], set(), set(), []
    while queue:
        page = queue.pop()
        if page in seen:
            continue
        seen.add(page)
        browser.get(page)
        images = browser.execute_script(
            "return [...document.images].map(i => [i.src, i.complete && i.naturalWidth > 0]);"
        )
        broken += [f"{page}: image {src}" for src, ok in images if not ok]
        links = browser.execute_script("return [...document.links].map(a => a.href);")
        for link in links:
            target = urldefrag(link).url
            if urlparse(target).netloc != urlparse(server).netloc or target in checked:
                continue
            checked.add(target)
            try:
                with urllib.request.urlopen(target, timeout=10) as answer:
                    status = answer.status
            except urllib.error.HTTPError as error:
                status = error.code
            if status != 200:
                broken.append(f"{page}: link {target} answered {status}")
            elif target.endswith(".html"):
                queue.append(target)
    assert len(seen) >= 12, sorted(seen)
    assert broken == []
