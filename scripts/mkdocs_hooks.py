"""MkDocs hook: the site's home page is README.md, with its links into docs/ made relative to docs/.

The README is the front door on GitHub and the site's index alike; one text, no copy to drift."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != "index.md":
        return markdown
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)
