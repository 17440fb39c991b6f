"""corpus: the King James Bible from Debian's bible-kjv(-text) packages, split into chapters.

The 1611 translation is in the public domain; Debian ships it compressed with the `bible` reader.
"""
import re
import subprocess

RANGE = "gen1:1-rev22:21"


def read_chapters(bible="bible"):
    """Returns [(heading, [verse, ...]), ...] in canonical order."""
    try:
        out = subprocess.run([bible, "-l100000", RANGE], check=True, capture_output=True,
                             text=True).stdout
    except FileNotFoundError:
        raise SystemExit(f"corpus: `{bible}` is not installed: run scripts/setup --train "
                         "(Debian's bible-kjv)")
    chapters, verse_re = [], re.compile(r"^\s+\d+ (.*)$")
    for line in out.splitlines():
        m = verse_re.match(line)
        if m:
            chapters[-1][1].append(m.group(1).strip())
        elif line.strip():
            chapters.append((line.strip(), []))
    if len(chapters) != 1189:
        raise SystemExit(f"corpus: expected 1189 chapters from `{bible}`, found {len(chapters)}")
    return chapters


def is_held_out(index):
    """Every 20th chapter (from the 8th) is held out: 60 chapters spread over the whole book."""
    return index % 20 == 7


def chapter_text(heading, verses):
    return heading + "\n\n" + "\n".join(verses) + "\n"


def chat_pairs(verses):
    """Consecutive verses as a user turn and the assistant's reply, so that the chat template
    leads somewhere: the model answers a verse with the verse that follows it."""
    return [(verses[i], verses[i + 1]) for i in range(len(verses) - 1)]
