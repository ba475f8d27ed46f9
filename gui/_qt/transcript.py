"""The Rollouts tab's detail pane: the selected line as a transcript, long parts folded.

Why one rich-text browser and not a widget per message: a trajectory may hold thousands of messages,
and one document keeps them selectable and copyable as a whole.  A long part (``transcript.folds``)
opens folded with a "show all" link; a click on it unfolds that part (and "fold" folds it again),
re-rendering the document where it was scrolled.  What the parts are is ``pilothouse.gui.transcript``'s.
"""

from __future__ import annotations

from html import escape

from PySide6.QtCore import QEvent, QUrl
from PySide6.QtWidgets import QTextBrowser

from ..themes import Theme
from ..transcript import Part, Section, fold_note, preview
from .theme import current, is_restyle

FOLD = "fold:"  # link scheme of the fold toggles: fold:<part number>


class TranscriptView(QTextBrowser):
    def __init__(self) -> None:
        super().__init__(openLinks=False, placeholderText="select a row to read it in full")
        self.sections: list[Section] = []
        self.unfolded: set[int] = set()  # long parts the user opened, by their number in the document
        self.anchorClicked.connect(self._on_link)

    def show_sections(self, sections: list[Section]) -> None:
        self.sections, self.unfolded = sections, set()
        self._render()
        self.verticalScrollBar().setValue(0)

    def parts(self) -> list[Part]:
        """Every part shown, numbered as the fold links number them."""
        return [p for s in self.sections for p in s.parts]

    def folded(self) -> list[bool]:
        """For each long part, whether it is folded now."""
        return [i not in self.unfolded for i, p in enumerate(self.parts()) if p.long]

    def toggle(self, number: int) -> None:
        self.unfolded ^= {number}
        scroll = self.verticalScrollBar().value()
        self._render()
        self.verticalScrollBar().setValue(scroll)

    def _on_link(self, url: QUrl) -> None:
        link = url.toString()
        if link.startswith(FOLD):
            self.toggle(int(link[len(FOLD):]))

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        if is_restyle(event) and getattr(self, "sections", None):
            self._render()  # the role colors are the theme's
        super().changeEvent(event)

    def _render(self) -> None:
        if not self.sections:
            self.setPlainText("")
            return
        theme = current()
        html, number = [], 0
        for section in self.sections:
            html.append(f"<p style='margin-top:10px; white-space:pre-wrap'><b>{escape(section.heading)}</b></p>")
            if section.text:
                html.append(f"<div style='white-space:pre-wrap'>{escape(section.text)}</div>")
            for part in section.parts:
                html.append(self._part(part, number, theme))
                number += 1
        self.setHtml("".join(html))

    def _part(self, part: Part, number: int, theme: Theme) -> str:
        """A part's header in its role's color (tool calls and links in the theme's blue, which
        keeps its contrast on both themes' base), its body whole, or folded with a link."""
        color = {"call": theme.status_paused, "reasoning": theme.dim_text}.get(part.kind, theme.text)
        if part.role == "tool":
            color = theme.status_running
        head = f"<p style='margin-top:6px; color:{color}'><b>{escape(part.title)}</b></p>"
        style = "white-space:pre-wrap; margin-left:12px"
        if part.kind == "call":
            style += f"; font-family:monospace; background-color:{theme.button}"
        if not part.long:
            return f"{head}<div style='{style}'>{escape(part.body)}</div>"
        if number in self.unfolded:
            link = f"<a href='{FOLD}{number}' style='color:{theme.status_paused}'>▴ fold</a>"
            return f"{head}<div style='{style}'>{escape(part.body)}</div><p style='margin-left:12px'>{link}</p>"
        link = f"<a href='{FOLD}{number}' style='color:{theme.status_paused}'>▾ show all ({fold_note(part.body)})</a>"
        return f"{head}<div style='{style}'>{escape(preview(part.body))} …</div><p style='margin-left:12px'>{link}</p>"
