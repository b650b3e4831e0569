"""The interactive memory page (tenure/memory_html.py), opened in a real browser.

The page is checked as a browser renders it: headless Chromium (Debian's
``chromium`` and ``chromium-driver``, driven through Selenium) opens the file
with the network off, the test counts the bands drawn, hovers one and reads
the tooltip, and finds the bands' colours in a screenshot.  Where Chromium is
absent these tests skip with the reason; CI installs it
(``TENURE_REQUIRE_OPTIONAL=1`` turns the skip into a failure there).
"""

from __future__ import annotations

import io
import json
import re
import shutil

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.timeline import KINDS, band_polygons, byte_limits
from tenure.memory_html import PLOT_HEIGHT, STEP_WIDTH
from tests.helpers import need, need_module
from tests.test_memory_timeline import training_step

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

#: flags for a root user on a machine without network or GPU
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1400,1000")


@pytest.fixture(scope="module")
def browser():
    need(CHROMIUM is not None and CHROMEDRIVER is not None,
         "headless Chromium is not installed (Debian: apt install chromium chromium-driver)")
    need_module("selenium", "pip install selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_network_conditions(offline=True, latency=0, download_throughput=0,
                                  upload_throughput=0)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A page of two panels (a training step without and with a budget)."""
    mode = tn.Mode(linker="py")
    with tn.config.change_flags(allow_gc=True):   # a budget needs it (TENURE_FLAGS may not)
        (f, args), (g, _) = training_step(mode), training_step(mode, 0.0)
        timelines = [f.memory_timeline(*args), g.memory_timeline(*args)]
    path = tmp_path_factory.mktemp("html") / "memory.html"
    tn.memory_html(timelines, path=path, labels=["no budget", "budget 0.0"])
    return path, timelines


def test_the_page_is_self_contained(page):
    path, _ = page
    text = path.read_text()
    # nothing is fetched: no links, no sources, no address but the SVG namespace
    assert not re.search(r"<link|<img|<iframe|\bsrc=", text)
    assert set(re.findall(r"https?://[^\s\"']+", text)) <= {"http://www.w3.org/2000/svg"}


def test_the_embedded_data_is_the_timeline(page):
    path, timelines = page
    text = path.read_text()
    data = re.search(r'<script type="application/json" id="timeline-data">(.*?)</script>',
                     text, re.S).group(1)
    assert json.loads(data.replace("<\\/", "</")) == [t.to_dict() for t in timelines]


def test_bands_render_in_the_browser(browser, page):
    from selenium.webdriver.common.by import By
    path, timelines = page
    browser.get(path.as_uri())
    panels = browser.find_elements(By.CSS_SELECTOR, "div.panel")
    assert [p.find_element(By.TAG_NAME, "h2").text for p in panels] == ["no budget",
                                                                      "budget 0.0"]
    for panel, timeline in zip(panels, timelines):
        bands = panel.find_elements(By.CSS_SELECTOR, "path.band")
        polygons = band_polygons(timeline)
        assert len(bands) == len(polygons)
        assert [b.get_attribute("data-kind") for b in bands] == \
            [seg.kind for _, _, seg in polygons]
        # rendered, not only present: every band's laid-out box spans its
        # steps and its bytes on the page's scale
        low, high = byte_limits(timelines)
        for element, (vertices, _, seg) in zip(bands, polygons):
            ys = [y for _, y in vertices]
            height = (max(ys) - min(ys)) / (high - low) * PLOT_HEIGHT
            assert element.rect["height"] == pytest.approx(height, abs=1.0)
            assert element.rect["width"] == pytest.approx((seg.stop - seg.start + 1) * STEP_WIDTH,
                                                          abs=1.0)
        peak = panel.find_element(By.CSS_SELECTOR, "svg").text
        assert "predicted peak" in peak and f"{timeline.predicted_peak:,} bytes" in peak


def test_hovering_a_band_names_buffer_op_bytes_and_lifetime(browser, page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    path, timelines = page
    browser.get(path.as_uri())
    tooltip = browser.find_element(By.ID, "tooltip")
    assert not tooltip.is_displayed()
    panel = browser.find_element(By.ID, "panel-0")
    band = panel.find_elements(By.CSS_SELECTOR, 'path.band[data-kind="in place"]')[0]
    ActionChains(browser).move_to_element(band).perform()
    assert tooltip.is_displayed()
    text = tooltip.text
    _, drawn, seg = next((v, b, s) for v, b, s in band_polygons(timelines[0])
                         if s.kind == "in place")
    assert text.splitlines()[0] == drawn.name
    assert f"held by {seg.variable} (in place)" in text
    assert f"made by {seg.op}" in text
    assert f"{drawn.nbytes:,} bytes" in text
    assert f"alive from step {seg.start} ({timelines[0].steps[seg.start]}) to step " \
           f"{seg.stop} ({timelines[0].steps[seg.stop]})" in text
    # the mouse moves off the band: the tooltip goes
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
    assert not tooltip.is_displayed()


def test_screenshot_shows_the_band_colours(browser, page):
    need_module("matplotlib", 'pip install -e ".[plot]"')
    import matplotlib.image   # a PNG reader
    path, timelines = page
    browser.get(path.as_uri())
    pixels = matplotlib.image.imread(io.BytesIO(browser.get_screenshot_as_png()), format="png")
    rgb = np.round(pixels[..., :3] * 255).astype(np.uint8)
    for kind in ("borrowed input", "shared variable", "new", "in place"):
        colour = np.array([int(KINDS[kind][i:i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)
        assert (rgb == colour).all(axis=-1).any(), \
            f"no pixel of {kind}'s colour {KINDS[kind]} on the page"


def test_memory_html_of_a_function(tmp_path):
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x).sum(), name="sum of exp")
    text = tn.memory_html(f, [np.ones(10)], tmp_path / "f.htm")
    assert (tmp_path / "f.htm").read_text() == text
    assert "<h2>sum of exp</h2>" in text


def test_bad_path_and_labels(tmp_path):
    x = tn.vector("x")
    f = tn.function([x], x * 2)
    with pytest.raises(ValueError, match=r"must end in \.html or \.htm"):
        tn.memory_html(f, [np.ones(3)], tmp_path / "page.txt")
    with pytest.raises(ValueError, match="2 labels for 1 functions"):
        tn.memory_html(f, [np.ones(3)], labels=["a", "b"])
    with pytest.raises(TypeError, match="memory_html: expected a compiled function"):
        tn.memory_html("f", [np.ones(3)])
