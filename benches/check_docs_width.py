"""Checks that no table or code block of the docs site scrolls sideways at
1280 px browser width.

Serves a built site over HTTP, opens every HTML page in headless Chromium at
a 1280x900 window (selenium), and lists each code block (``pre``) and table
(including mkdocs-material's ``.md-typeset__scrollwrap`` / ``.md-typeset__table``
wrappers) whose ``scrollWidth`` exceeds its ``clientWidth`` by more than 1 px:
page, element kind, and the two widths. Exits 1 if anything scrolls.

    PYTHONPATH=python mkdocs build --strict -d /tmp/site
    pip install selenium        # and Chromium + chromedriver (Debian: chromium chromium-driver)
    python benches/check_docs_width.py /tmp/site [--width 1280] [--height 900] [--page performance]

A maintenance tool, not run in CI; tests/docs/test_docs_width.py is the cheap
static guard (the length of the lines of fenced code) that keeps it true.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import threading
from pathlib import Path

from selenium import webdriver

#: Each code block (a ``pre``, or the ``code`` in it, which is what scrolls in
#: mkdocs-material) and each table (or its scroll wrappers), reported once with
#: its widest overflow: [kind, scrollWidth, clientWidth, its first text].
_SCRIPT = """
const blocks = [
  ["code block", "pre", (el) => [el, ...el.querySelectorAll(":scope > code")]],
  ["table", "table", (el) => [el, el.closest(".md-typeset__table"),
                               el.closest(".md-typeset__scrollwrap")]],
];
const out = [];
for (const [kind, selector, parts] of blocks) {
  for (const el of document.querySelectorAll(selector)) {
    if (el.offsetParent === null) continue;  // not displayed
    let worst = null;
    for (const part of parts(el)) {
      if (part && part.scrollWidth > part.clientWidth + 1 &&
          (!worst || part.scrollWidth - part.clientWidth >
                     worst.scrollWidth - worst.clientWidth)) worst = part;
    }
    if (worst) {
      const text = (el.innerText || "").trim().split("\\n")[0].slice(0, 60);
      out.push([kind, worst.scrollWidth, worst.clientWidth, text]);
    }
  }
}
return out;
"""


def _serve(root: Path) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def check(
    site: Path, width: int, height: int, only: list[str] | None = None
) -> list[tuple[str, str, int, int, str]]:
    """Every element of ``site``'s pages (those containing one of ``only``, if
    given) that scrolls sideways at ``width`` x ``height``: (page, kind,
    scrollWidth, clientWidth, its first line of text)."""
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    pages = [p for p in pages if p != "404.html" and (not only or any(o in p for o in only))]
    server = _serve(site)
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options)
    found = []
    try:
        driver.set_window_size(width, height)
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        for page in pages:
            driver.get(base + page)
            for kind, scroll, client, text in driver.execute_script(_SCRIPT):
                found.append((page, kind, scroll, client, text))
        inner = driver.execute_script("return window.innerWidth")
    finally:
        driver.quit()
        server.shutdown()
    print(f"{len(pages)} pages at a {width}x{height} window (innerWidth {inner} px)")
    return found


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("site", type=Path, help="the built site (mkdocs build -d SITE)")
    cli.add_argument("--width", type=int, default=1280)
    cli.add_argument("--height", type=int, default=900)
    cli.add_argument("--page", action="append", help="only the pages whose path contains this")
    args = cli.parse_args(argv)
    found = check(args.site, args.width, args.height, args.page)
    for page, kind, scroll, client, text in found:
        print(f"{page}: {kind}: scrollWidth {scroll} > clientWidth {client}: {text!r}")
    pages = len({f[0] for f in found})
    print(f"{len(found)} elements scroll sideways, on {pages} pages")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
