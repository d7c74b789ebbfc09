"""Sphinx configuration of cutile's docs site (built by scripts/build_docs.sh).

The guide pages are the repository's Markdown files, copied by the script into the
build's source folder with their paths kept (so their links between each other
hold); the API reference is autodoc over the public modules (docs/api/). The
build runs with warnings as errors.
"""

from __future__ import annotations

import inspect

from docutils.nodes import Node
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

project = "cutile"
author = "the cutile authors"
root_doc = "index"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]  # napoleon: the Args:/Attributes: sections
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]

html_theme = "alabaster"
html_title = "cutile"
html_static_path: list[str] = []

myst_heading_anchors = 3  # README links to sections by their GitHub anchors
myst_enable_extensions = ["colon_fence"]
suppress_warnings = ["myst.header"]  # the guide pages start at any heading level, as GitHub renders them

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_mock_imports = ["torch"]  # cutile.torch's page, where torch (optional) is not installed
# Docstrings write `name` for a reference to a name in scope: a link where the site
# documents it, else shown as code.
default_role = "py:obj"


class KernelLanguageDirective(SphinxDirective):
    """``.. kernel-language::``: the kernel language's DSL functions and annotation
    objects (``Tensor``, ``Mut``, ``Constant``), each with its signature and docstring.
    They are objects (`Builtin`, factories), not functions, so autodoc passes them by."""

    def run(self) -> list[Node]:
        from cutile_compiler import language
        from cutile_compiler._builtins import DSL_FUNCTIONS  # the registry the language's exports come from

        lines: list[str] = []
        for name in ("Tensor", "Mut", "Constant"):
            lines += [f".. py:data:: {name}", "   :module: cutile_compiler.language", ""]
            lines += _indented(inspect.getdoc(type(getattr(language, name))))
        for name, function in DSL_FUNCTIONS.items():
            try:
                signature = str(inspect.signature(function))
            except (TypeError, ValueError):
                signature = "(...)"
            lines += [f".. py:function:: {name}{signature}", "   :module: cutile_compiler.language", ""]
            lines += _indented(inspect.getdoc(function))
        return self.parse_text_to_nodes("\n".join(lines))


def _indented(doc: str | None) -> list[str]:
    return [f"   {line}" if line else "" for line in (doc or "").splitlines()] + [""]


def setup(app: Sphinx) -> None:
    app.add_directive("kernel-language", KernelLanguageDirective)
