"""A Helm chart's values file repeating the NVIDIA resource its templates already report (issue
#16, round-32 audit GC#18, REDUNDANT). Whole run, from runplan.whole_run_passes (after
dockerargs29.py, the same kind of fold for a Dockerfile's build arguments).

vLLM's `examples/deployment/chart-helm/`:

    # values.yaml
    resources:
      requests:
        nvidia.com/gpu: 1                                  # NPU709 (line 36, also 43)
    # templates/deployment.yaml
    {{- if and (gt (int (index .Values.resources.requests "nvidia.com/gpu")) 0) ... }}   # NPU709
    runtimeClassName: nvidia

The values file only holds the number the chart's templates read; the templates decide what the pod
asks of the cluster (the resource, the NVIDIA runtime class, the GPU node affinity), and the run
reports them there. A user ports the chart once: make it request Ascend NPUs (`huawei.com/Ascend910`)
in the templates and rename the key in the values with it. Two findings of one root cause.

`review` folds such a values finding into the template's: the values file's NPU709 finding goes and
the template finding's message names it (file and lines), as dockerargs29.py names the CI lines it
folds. Nothing is dropped. It applies where the values file is `values.yaml` (or `values-*.yaml`,
`values.*.yaml`) of a folder whose `templates/` folder holds a file of the run with an open NPU709
error or warning at the values finding's severity or a higher one, whose text reads the same key
from `.Values` (a line naming both `.Values` and the quoted key, `index .Values.resources.requests
"nvidia.com/gpu"`), and where every place of the values finding is a YAML key line of that key.

Kept (the nearest true cases): a values file whose chart's templates do not read the key from
`.Values` (a template that writes the resource itself: the values key is then the only report of
it), a chart whose templates report nothing, and a place that is no key of the values file (a
runtime class name `runtimeClassName: nvidia` set in the values).
"""

from __future__ import annotations

import posixpath
import re
from typing import Optional

from .dockerargs29 import fold_into_hosts

_RANK = {"error": 2, "warning": 1, "info": 0}
_CODE = "NPU709"
_VALUES = re.compile(r"(^|/)values([.-][\w.-]+)?\.ya?ml$")


def _open(finding) -> bool:
    from .moot import is_open

    return finding.code == _CODE and not finding.fixable and finding.cell is None and is_open(finding) \
        and finding.severity in ("error", "warning")


def _places(finding) -> list[int]:
    return [finding.line, *(line for line, _c, _s in finding.also)]


def _key_lines(lines: list[str], finding) -> bool:
    """Whether every place of `finding` is a YAML key line of its source (`nvidia.com/gpu: 1`)."""
    key = finding.source or ""
    if not key:
        return False
    pattern = re.compile(r"^\s*[\"']?" + re.escape(key) + r"[\"']?\s*:")
    return all(0 < n <= len(lines) and pattern.match(lines[n - 1]) for n in _places(finding))


def _reads(lines: list[str], key: str) -> bool:
    quoted = re.compile(r"[\"']" + re.escape(key) + r"[\"']")
    return any(".Values" in line and quoted.search(line) for line in lines)


def review(results: list, paths: dict) -> list:
    """The results, with each values finding of the docstring's shape folded into its template's."""
    from .modpaths import result_bytes

    values = [i for i, r in enumerate(results) if _VALUES.search(r.relpath) and any(_open(f) for f in r.findings)]
    if not values:
        return results
    texts: dict[int, list[str]] = {}

    def lines_of(i: int) -> list[str]:
        if i not in texts:
            data = result_bytes(results[i], paths) or b""
            texts[i] = data.decode("utf-8", "replace").splitlines()
        return texts[i]

    out = list(results)
    for i in values:
        folder = posixpath.dirname(results[i].relpath)
        prefix = posixpath.join(folder, "templates") + "/"
        templates = [j for j, r in enumerate(results) if r.relpath.startswith(prefix) and j != i
                     and any(_open(f) for f in r.findings)]
        if not templates:
            continue
        folded = []
        for finding in results[i].findings:
            if _open(finding) and _key_lines(lines_of(i), finding):
                host = _host(out, templates, lines_of, finding)
                if host is not None:
                    folded.append((finding, host))
        fold_into_hosts(out, i, folded, lambda finding, where: (
            f"(the chart's values set it too, reported once here: `{results[i].relpath}` {where}, "
            f"`{finding.source}`)"))
    return out


def _host(results: list, templates: list[int], lines_of, finding) -> Optional[tuple[int, int]]:
    """(result, finding index) of a template finding that covers `finding`, or None."""
    for j in templates:
        if not _reads(lines_of(j), finding.source or ""):
            continue
        for k, host in enumerate(results[j].findings):
            if _open(host) and _RANK[host.severity] >= _RANK[finding.severity]:
                return j, k
    return None
