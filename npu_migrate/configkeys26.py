"""A helper's name in a configuration file only as a setting's key (issue #16, round-21 audit
BM#1). Read by callersonly.py's review.

callersonly.py keeps a helper's finding where a non-Python file of the run names the helper, a
caller its parse cannot see (`_target_: pkg.utils.helper` in a Hydra config). A recipe naming a
setting after the feature the helper serves is no such caller:

    # recipes/model.yaml
    context_length: 1048576
    flashinfer_autotune: true        # a flag the launcher reads, not a dotted path to a function

`names_helper(data, name)` is True where the text names `name` as a whole word (`x_name` and
`name_v2` are other names) in any way but as the key of a one-line mapping entry whose value is a
plain scalar (a boolean, a number, null), optionally a list item (`- name: false`) and followed by
a comment. A key with a string or nested value (a registry keyed by function names), a dotted path,
a value, prose: still names the helper.
"""

from __future__ import annotations

import re

_SETTING = re.compile(
    rb"^[ \t]*(?:-[ \t]+)?[\"']?(?P<key>[A-Za-z_]\w*)[\"']?[ \t]*:[ \t]*"
    rb"(?:true|false|True|False|TRUE|FALSE|yes|no|on|off|null|Null|NULL|~|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    rb"[ \t]*(?:#[^\n]*)?$")


def names_helper(data: bytes, name: str) -> bool:
    """The text names `name` other than as a scalar setting's key (see the module's doc)."""
    word = name.encode()
    if word not in data:
        return False
    pattern = re.compile(rb"(?<![\w])" + re.escape(word) + rb"(?![\w])")
    for line in data.split(b"\n"):
        if word not in line or not pattern.search(line):
            continue
        setting = _SETTING.match(line.rstrip(b"\r"))
        if setting is None or setting.group("key") != word or len(pattern.findall(line)) != 1:
            return True
    return False
