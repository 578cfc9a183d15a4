"""The screenshot of the class insight page in docs/ (docs/insight-screenshot.png).

    PYTHONPATH=shared python -m msda_labs.classroom.sample_class --students 60 \\
        --labs lab01 lab05 lab08 --seed 14 --out /tmp/class60 \\
        --cache tests/classroom/data/sample-class-cache
    PYTHONPATH=shared python -m msda_labs insight /tmp/class60 \\
        --out /tmp/class60-page/insight.html \\
        --due lab01=2026-10-01 --due lab05=2026-11-01 --due lab08=2026-12-15 --today 2026-12-01 \\
        --threshold 0.3
    python scripts/insight_screenshot.py /tmp/class60-page/insight.html docs/insight-screenshot.png

Opens the page in headless Chromium (Debian's ``chromium``, or ``$MSDA_CHROMIUM``) through
Playwright and saves the top of the page and the first lab's section, one image.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright


def main(page_path: str, png: str) -> int:
    executable = os.environ.get("MSDA_CHROMIUM") or shutil.which("chromium")
    if executable is None:
        print("Chromium is not installed (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable,
                                     args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1200, "height": 1500})
        page.goto(Path(page_path).resolve().as_uri())
        page.screenshot(path=png, full_page=False)
        browser.close()
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
