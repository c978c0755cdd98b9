"""Backend classes that a project's enum registry names and only another accelerator's platform
lists (issue #16, round 21: BG#3).

Projects with a platform registry (platforms20.py) often keep a second registry, for the kernels
each platform may pick: an `Enum` whose members are dotted class paths
(`FLASH_MLA = "pkg.attention.backends.flash_mla.FlashMLABackend"`), and each platform class returns
its own priority list of members (`[BackendEnum.FLASH_MLA, BackendEnum.TRITON_MLA]`). A backend
module is then named by a string in the enum, which runs everywhere, so platforms20.py counted the
module as reached. Round 21 (BG#3) found a vendor attention backend whose only member is listed
only in the CUDA platform's priority list: an NPU host picks its own backends in its own platform
class and never loads it.

* **The registry, by structure.** A module-level class that derives from `Enum` (or a class whose
  name ends in `Enum`, or whose metaclass is an `EnumMeta`), with two or more members whose values
  are dotted class paths of the run.
* **The member's users.** Every library (non-test) reference to the member: `Enum.MEMBER`
  (through the class name or an `import ... as` alias of it), `Enum["MEMBER"]`,
  `getattr(Enum, "MEMBER")`, and in the enum's own module any `.MEMBER` outside the member's
  own assignment (`cls.MEMBER` in its methods); an iteration over the whole enum (`for b in
  Enum`, `list(Enum)`, `Enum.__members__`) references every member. A member with no reference at all is left as
  it is: a user may name it, and nothing says which platform takes it.
* **The change.** platforms20.py asks this module about a string site that is such a member's
  value: the site counts as dead when every reference lies in code already found reached only
  through a CUDA/ROCm/XPU platform class (a member also listed by a platform that runs on an NPU
  host, or by the model runner's defaults, keeps the module reported). The finding stays
  platforms20's info, and names the priority-list line and the enum entry.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Optional

_CLASS_PATH = re.compile(r"^[A-Za-z_]\w*(?:\.\w+)+\.[A-Z]\w*$")


def _is_enum(node: ast.ClassDef) -> bool:
    names = [n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in node.bases]
    metas = [k.value for k in node.keywords if k.arg == "metaclass"]
    metas = [m.attr if isinstance(m, ast.Attribute) else getattr(m, "id", "") for m in metas]
    return (any(n.endswith("Enum") for n in names) or node.name.endswith("Enum")
            or any(m.endswith("EnumMeta") or m.endswith("EnumType") for m in metas))


class EnumEntries:
    """The class-path members of the run's enum registries and where the library names them."""

    def __init__(self, results, modules, text_of, library: list[int]) -> None:
        self.results, self.modules = results, modules
        # (file, line of the value) -> (enum, member, module index of the class, "relpath:line")
        self.by_site: dict[tuple[int, int], tuple[str, str, int, str]] = {}
        self.refs: dict[tuple[str, str], list[tuple[int, int]]] = {}
        enums: dict[str, tuple[int, set[str]]] = {}
        for j in library:
            data = text_of(j)
            if not data or b"Enum" not in data:
                continue
            tree = modules.tree(j)
            if tree is None:
                continue
            for node in tree.body:
                if not (isinstance(node, ast.ClassDef) and _is_enum(node)):
                    continue
                members = []
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                            and isinstance(stmt.targets[0], ast.Name)
                            and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
                            and _CLASS_PATH.match(stmt.value.value)):
                        module = modules.by_name.get(stmt.value.value.rpartition(".")[0])
                        if module is not None:
                            members.append((stmt, module))
                if len(members) < 2:
                    continue
                enums[node.name] = (j, {s.targets[0].id for s, _m in members})
                relpath = results[j].relpath
                for stmt, module in members:
                    entry = (node.name, stmt.targets[0].id, module, f"{relpath}:{stmt.lineno}")
                    for line in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1):
                        self.by_site[(j, line)] = entry
        if not enums:
            return
        self._find_refs(text_of, library, enums)

    def _find_refs(self, text_of, library, enums) -> None:
        for j in library:
            data = text_of(j)
            if not data:
                continue
            text = data.decode("utf-8", "replace")
            for name, (home, members) in enums.items():
                if name not in text and j != home:
                    continue
                aliases = {name} | set(re.findall(rf"\b{name}\s+as\s+(\w+)", text))
                for alias in aliases:
                    pattern = (rf"\b{alias}\.(\w+)|\b{alias}\[\s*[\"'](\w+)[\"']\s*\]"
                               rf"|getattr\(\s*{alias}\s*,\s*[\"'](\w+)[\"']")
                    for match in re.finditer(pattern, text):
                        member = next(g for g in match.groups() if g)
                        if member in members:
                            self._add(name, member, j, text.count("\n", 0, match.start()) + 1)
                    # an iteration over the whole enum may pick any member: a reference to each
                    every = rf"\bin\s+{alias}\b(?![.\[(])|\b(?:list|tuple|set|iter)\(\s*{alias}\s*\)|\b{alias}\.__members__"
                    for match in re.finditer(every, text):
                        line = text.count("\n", 0, match.start()) + 1
                        for member in members:
                            self._add(name, member, j, line)
                if j == home:
                    for match in re.finditer(r"\.([A-Z_][A-Z0-9_]*)\b", text):
                        member = match.group(1)
                        line = text.count("\n", 0, match.start()) + 1
                        own = self.by_site.get((j, line))
                        if member in members and not (own and own[1] == member):
                            self._add(name, member, j, line)

    def _add(self, name: str, member: str, j: int, line: int) -> None:
        sites = self.refs.setdefault((name, member), [])
        if (j, line) not in sites:
            sites.append((j, line))

    def named_from(self, j: int, dead_at: Callable[[int, int], Optional[str]]) -> set[int]:
        """The modules of the members that file j references in code already found dead."""
        out = set()
        for key, sites in self.refs.items():
            if any(s == j and dead_at(s, line) is not None for s, line in sites):
                out |= {e[2] for e in self.by_site.values() if (e[0], e[1]) == key}
        return out

    def dead_site(self, j: int, line: int, dead_at, secondary=None) -> Optional[tuple[bool, Optional[tuple[str, str]]]]:
        """For a string site: None when it is no enum member's value; else (True, (why, site)) when
        every reference to that member lies in dead code (at least one), (False, None) otherwise.
        `secondary(file, line, enum, member)`, when given, names references that load nothing on an
        NPU host (platformgates28.py: a branch it never takes, a comparison): they neither keep the
        member reached nor give the reason, and at least one other reference must be dead."""
        entry = self.by_site.get((j, line))
        if entry is None:
            return None
        name, member, _module, where = entry
        sites = self.refs.get((name, member), [])
        whys = [(dead_at(s, ln), s, ln) for s, ln in sites]
        if secondary is not None:  # (references that load nothing there: never the reason given)
            whys = [(w, s, ln) for w, s, ln in whys if w is not None or secondary(s, ln, name, member) is None]
        if not whys or any(w is None for w, _s, _l in whys):
            return (False, None)
        why, s, ln = whys[0]
        return (True, (why, f"{self.results[s].relpath}:{ln} (the entry `{name}.{member}` of {where},"
                            " listed only there)"))
