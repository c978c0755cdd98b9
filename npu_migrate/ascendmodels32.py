"""vLLM models vllm-ascend replaces with its own implementation: review-level notes (issue #16,
audit round 32 GB#29, GB#37, GB#38, GC#15, GC#19, GC#20, GC#25, GC#36, GC#37, GC#39; round 33
HA#3). Whole run,
from runplan.whole_run_passes, right after ascendfacts30.py (the same kind of fact, the same
package walk).

vllm-ascend's `register_model()` (vllm_ascend/models/__init__.py, a vLLM general plugin) calls
`ModelRegistry.register_model(<architecture>, "vllm_ascend.models.<m>:<Class>")` for some
architectures, so on an Ascend host vLLM builds the plugin's class for them, never its own. The
`[[models]]` entries of rules/vllm_ascend.toml hold these facts, each with the architectures, the
vLLM modules that implement them (`modules`), the registry file whose architecture table is the
route the fact closes (`registry`), what the plugin's own replacement imports or subclasses from
those modules (`plugin_uses`: `path` for a whole module, `path:Name` for one class or function and
what it names), and the vllm-ascend file and version it was read from.

The models' modules form one package (_Package of ascendfacts30: a top-level function or class is
reached when code outside the package names it, when the package's module-level code or a reached
unit names it). Beyond that walk, a unit is reached when:

* the registry maps an architecture the plugin does NOT replace to it (`"MiniMaxM3MTP":
  ("vllm.models.minimax_m3", "MiniMaxM3MTP")`, `"KimiLinearForCausalLM"`: routes the fact leaves
  open keep all they build);
* the plugin's replacement imports or subclasses it (`plugin_uses`).

A module shared with a model the plugin does not replace is outside the package (`modules` lists
only the replaced models' own folders), so it keeps its findings whoever else names it. An open
finding whose every line lies in units not reached becomes info, its message naming the fact and
its source (an external fact that can change with the plugin's version: never a scope, never
dropped). Applied only when the project is vLLM itself (ascendfacts30.vllm_root).

Wave 33 (h174, round 32 GB#29, GB#38, GC#20):

* a module-level `_KERNEL = KernelClass()` (ascendfacts30.module_instances: a class of the module
  with no `__init__`/`__new__` of its own, constant arguments, the name bound once) is a unit of its
  own, reached when code reads the name: building it at import launches nothing (DeepSeek V4's
  `_SAVE_PARTIAL_STATES_KERNEL`, read only by vLLM's own Compressor, GB#38);
* a route the facts leave open only through an architecture of the registry's `[draft_routes]`
  tables (`_SPECULATIVE_DECODING_MODELS`: "MiniMaxM3MTP", "DSparkV41DraftModel") is built only when
  the user configures speculative decoding: what only such routes reach is opt-in (policy P1), info
  naming the draft and the fact (GB#29); what the main routes reach keeps its severity;
* DeepSeek V4.1 (commit 0dcdd80d), with the Engram and image-preprocessing modules the plugin
  imports reached whole (GC#20).

Wave 34 (h182, round 33 HC#19): vLLM names its DeepSeek V4/V4.1 sparse-MLA backends in the
attention backend registry by dotted strings (`FLASHMLA_SPARSE_DSV4 =
"vllm.models.deepseek_v4.sparse_mla.DeepseekV4FlashMLABackend"`). The plugin's
`NPUPlatform.get_attn_backend_cls` returns only its own backends (the `[[backends]]` fact), so no
entry of that registry is ever resolved on an Ascend host: the files of `[closed_registries]` are
not outside code that reaches the models' units (vLLM's own model layer, which asks for those
backends, is a member and not built). An import or a dotted string anywhere else still reaches.

Wave 34 (h182, round 33 HC#38): a module-level set of classes a member only tests for membership
(`_RECORDABLE_BUILDERS = frozenset({CompressorMetadataBuilder, ...})`, `type(b) in
_RECORDABLE_BUILDERS`) builds none of them: the package walk (`instances=True`) does not take it for
module-level code that reaches them (membersets34.py). Kept: the set iterated, handed on, or spelled
by any other file.

Wave 35 (h192, round 33 HA#3): each entry's package treated the other replaced models' folders as
outside code whole, so DeepSeek V4.1's `dsv41_o_proj` (`from vllm.models.deepseek_v4.nvidia.ops.o_proj
import deep_gemm_fp8_o_proj`) kept V4's FP8 output projection and its `fused_inv_rope_fp8_quant`
reached, though only V4.1's DSpark draft reaches that function. Every entry is first walked as
before (a superset of what it reaches); then each entry's walk reads another entry's members as their
module-level code and the units that entry's own walk reached (`_PrunedTexts`: the lines of the other
top-level functions and classes blank): on every route for the first note, on the main routes only
for the draft note, which then also names the other entry's drafts whose draft-only units import
from this entry's modules or read a name their module imports from them. Kept: a member the plugin imports whole (`plugin_uses`), one that does not
parse, a unit the other entry reaches on a main route.

Not answered here: shared kernels several models reach (the mHC `hc_collapse_triton` of GC#36, also
called by layers/mhc.py; the FLA `solve_tril` of GC#37, also reached by the KDA ops and vendored
copies), and a vLLM class the plugin subclasses and calls up to (Kimi K3's `KimiK3DeltaAttention`:
AscendKimiK3DeltaAttention returns its own backend but calls `super().forward`, GC#15, GC#39,
GA#2): the subclass keeps the whole class reached. Qwen4Exp is registered at commit 000736f0 only.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import ascendfacts30


def _registry_targets(tree) -> list:
    """(architecture, module, class, table) of each `"Arch": ("module", "Class")` pair of the file's
    dicts; `table`: the module-level name the dict is assigned to ("" for another dict)."""
    tables = {id(stmt.value): stmt.targets[0].id for stmt in tree.body
              if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Tuple)
                    and len(value.elts) == 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                     for e in value.elts)):
                out.append((key.value, value.elts[0].value, value.elts[1].value, tables.get(id(node), "")))
    return out


def _open_routes(results, text_of, registry: list, replaced: set, modules: set, names: frozenset) -> Optional[dict]:
    """{unit name: (architecture, table)} of what the registry files map an architecture the facts do
    not replace to; None where one does not parse."""
    from . import astcache

    out: dict = {}
    for i in registry:
        data = text_of(i)
        tree = astcache.parse(data) if data else None
        if tree is None:
            return None
        for arch, module, cls, table in _registry_targets(tree):
            if arch in replaced or cls not in names:
                continue
            # (a bare module name is one of the registry's own folder, `("qwen3_dspark", ...)`: any
            # member of that last name is taken for it)
            if module in modules or any(n.endswith("." + module) for n in modules):
                out.setdefault(cls, []).append((arch, table))
    return out


def _plugin_seeds(results, prefix: str, members: list, of: dict) -> tuple:
    """(indices of the members the plugin imports whole, unit names it imports or subclasses)."""
    whole, seeds = set(), set()
    for i in members:
        for use in of[i].get("plugin_uses", ()):
            path, _colon, name = use.partition(":")
            if results[i].relpath == prefix + path:
                (seeds.add(name) if name else whole.add(i))
    return frozenset(whole), frozenset(seeds)


class _Walk:
    """The package walks of one `[[models]]` entry: `full` (every open route) and `plain` (the
    registry's main tables only, drafts aside); `text_of` may hide the units of other entries'
    members that their own walks did not reach (wave 35, `_PrunedTexts`)."""

    def __init__(self, results, text_of, prefix, library, registry, replaced, members, entry,
                 closed: frozenset = frozenset(), need_full: bool = True, need_plain: bool = True) -> None:
        from .modpaths import module_names

        self.members, self.entry, self.ok = members, entry, False
        self.package = ascendfacts30.Package(results, text_of, members, instances=True)
        modules = {name for i in members for name in module_names(results[i].relpath)}
        routes = _open_routes(results, text_of, registry, replaced, modules, self.package.names)
        if routes is None:
            return
        self.routes = routes
        self.whole, self.seeds = _plugin_seeds(results, prefix, members, {i: entry for i in members})
        # (the registry stays an outside file: an import or a dotted string there still reaches)
        inside = set(members)
        # (wave 34, round 33 HC#19: the attention backend registry, whose strings NPUPlatform never
        # resolves, reaches nothing)
        self.outside = [j for j in library if j not in inside and j not in closed]
        self.tables = frozenset(ascendfacts30.facts().get("draft_routes", {}).get("tables", ()))
        self.drafts = {name: sorted(a for a, t in places if t in self.tables) for name, places in routes.items()}
        self.main = frozenset(n for n, places in routes.items() if any(t not in self.tables for _a, t in places))
        drafts = bool(self.tables) and self.main != frozenset(routes)
        # (`need_full`/`need_plain`: the walks a caller reads; the one it does not read is not walked)
        if need_full or not drafts:
            self.full = self.package.reached(self.outside, self.whole, frozenset(routes) | self.seeds)
            if self.full is None:
                return
            self.plain_package, self.plain = self.package, self.full
        if drafts and need_plain:
            self.plain_package = ascendfacts30.Package(results, text_of, members, instances=True)
            self.plain = self.plain_package.reached(self.outside, self.whole, self.main | self.seeds)
            if self.plain is None:
                return
            if not need_full:
                self.full = self.plain
        self.ok = True

    def draft_names(self) -> set:
        """The draft architectures whose routes alone reach some unit of this entry."""
        return {a for n, archs in self.drafts.items() if n not in self.main for a in archs}


class _PrunedTexts:
    """`text_of` where each member of the other entries reads as its module-level code and the
    units their own walk reached (`keep`: {index: reached names}); the lines of every other
    top-level function and class are blank. A member the plugin imports whole, or one that does
    not parse, reads whole (wave 35, h192, round 33 HA#3: DeepSeek V4.1's `dsv41_o_proj`, which
    only its speculative-decoding draft reaches, is not outside code that reaches DeepSeek V4's
    `deep_gemm_fp8_o_proj` on the main routes)."""

    def __init__(self, text_of, keep: dict) -> None:
        self.text_of, self.keep, self.cache = text_of, keep, {}

    def __call__(self, i: int):
        if i not in self.keep:
            return self.text_of(i)
        if i not in self.cache:
            self.cache[i] = _pruned(self.text_of(i), self.keep[i])
        return self.cache[i]

    def get(self, i: int, default=None):
        found = self(i)
        return found if found is not None else default


def _pruned(data, keep: frozenset):
    """`data` with the lines of its top-level functions and classes not in `keep` blank."""
    from . import astcache

    tree = astcache.parse(data) if data else None
    if tree is None:
        return data
    lines = data.split(b"\n")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name not in keep:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            for n in range(first - 1, min(node.end_lineno or node.lineno, len(lines))):
                lines[n] = b""
    return b"\n".join(lines)


def _keep(walks: list, mine, plain: bool) -> dict:
    """{member index of another entry: the unit names its walk reached} (`plain`: on the main
    routes only), members the plugin imports whole aside."""
    out: dict = {}
    for walk in walks:
        if walk is mine:
            continue
        reached = frozenset(walk.plain if plain else walk.full)
        out.update({i: reached for i in walk.members if i not in walk.whole})
    return out


def _names_any(walk: _Walk, text_of, modules: set) -> bool:
    """Whether a unit of `walk` reached only through a draft route imports from `modules` (the
    dotted names of another entry's members) or reads a name its module imports from them."""
    from . import astcache

    if not modules or walk.full == walk.plain:
        return False
    for name in set(walk.full) - set(walk.plain):
        for i, node in walk.package.units.get(name, ()):
            tree = astcache.parse(text_of(i) or b"")
            if tree is None:
                return True
            imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module in modules
                        for a in n.names}
            if any(isinstance(n, ast.ImportFrom) and n.module in modules
                   or isinstance(n, ast.Name) and n.id in imported for n in ast.walk(node)):
                return True
    return False


def _review_entry(results, text_of, prefix, library, registry, replaced, members, entry,
                  closed: frozenset = frozenset(), walks: tuple = ()) -> list:
    """`review` for the members of one `[[models]]` entry; `closed`: indices of registry files whose
    dotted strings the plugin's platform never resolves (wave 34); `walks`: every entry's first
    walk, whose unreached units of the other entries' members are not outside code (wave 35)."""
    from .modpaths import module_names

    mine = next((w for w in walks if w.members == members), None)
    others: set = set()
    if mine is None:
        walk = _Walk(results, text_of, prefix, library, registry, replaced, members, entry, closed)
        plain_walk = walk
    else:
        walk = _Walk(results, _PrunedTexts(text_of, _keep(walks, mine, False)), prefix, library, registry,
                     replaced, members, entry, closed, need_plain=False)
        plain_walk = _Walk(results, _PrunedTexts(text_of, _keep(walks, mine, True)), prefix, library, registry,
                           replaced, members, entry, closed, need_full=False)
        # (the drafts of the other entries whose draft-only units name some of this one's)
        modules = {module_names(results[i].relpath)[0] for i in members if module_names(results[i].relpath)}
        others = {a for w in walks if w is not mine and _names_any(w, text_of, modules)
                  for a in w.draft_names()}
    if not walk.ok or not plain_walk.ok:
        return results
    package, reached, routes = walk.package, walk.full, walk.routes
    whole = walk.whole
    archs = ", ".join(f'"{a}"' for a in entry["architectures"])

    def note(name):
        return ascendfacts30.note_for(
            f"this code is reached only from vLLM's own model classes for {archs}, which the plugin replaces "
            f"(`{name}` is named only by the code of those models, and not by what the plugin's own models "
            f"import from vLLM)", entry)

    spans = {i: s for i, s in package.unreached_spans(reached).items() if i not in whole}
    results, _count = ascendfacts30.lowered(results, spans, note)
    # (wave 33, round 32 GB#29: a route open only through a draft architecture of the registry's
    # speculative-decoding table is built only when the user configures speculative decoding: what
    # only such routes reach is opt-in (policy P1), info naming the drafts and the fact; wave 35:
    # the drafts of another entry whose own draft-only units name this one's)
    if not walk.tables or walk.main == frozenset(routes) and not others:
        return results
    plain, kept = plain_walk.plain_package, plain_walk.plain
    named = ", ".join(f'"{a}"' for a in sorted(walk.draft_names() | others))

    def via(name):
        return ascendfacts30.note_for(
            f"this code is reached on an Ascend host only through vLLM's {named}, a draft model of the "
            f"registry's speculative-decoding table, built only when the user configures speculative "
            f"decoding (an explicit choice, off by default: opt-in); no other route reaches `{name}` there: "
            f"the plugin replaces vLLM's own model classes for {archs}", entry)

    spans = {i: s for i, s in plain.unreached_spans(kept).items() if i not in whole}
    results, _count = ascendfacts30.lowered(results, spans, via)
    return results


def review(results: list, paths: dict) -> list:
    """Open findings of vLLM's code only the model classes vllm-ascend replaces reach: info naming
    the fact and its source."""
    from .modpaths import RunTexts
    from .moot import is_open

    entries = ascendfacts30.facts().get("models", ())
    if not entries:
        return results
    text_of = RunTexts(results, paths or {})
    prefix = ascendfacts30.vllm_root(results, text_of)
    if prefix is None:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    library = [i for i in python if not ascendfacts30.TEST_PART.search(results[i].relpath[len(prefix):])]
    of = {i: e for e in entries for i in library if ascendfacts30.in_paths(results[i].relpath, prefix, e["modules"])}
    members = sorted(of)
    if not any(is_open(f) for i in members for f in results[i].findings):
        return results
    registry = [i for i in library if ascendfacts30.in_paths(results[i].relpath, prefix,
                                                             {p for e in entries for p in e.get("registry", ())})]
    replaced = {a for e in entries for a in e["architectures"]}
    closed = frozenset(i for i in library if ascendfacts30.in_paths(
        results[i].relpath, prefix, set(ascendfacts30.facts().get("closed_registries", {}).get("files", ()))))
    # (one package per entry: a unit name another model's folder also defines is not taken for it;
    # the other models' folders are outside code like any other)
    groups = [(entry, [i for i in members if of[i] is entry]) for entry in entries]
    # (wave 35, h192, round 33 HA#3: each entry's first walk, so that another replaced model's
    # folder reaches this one's units only through its own reached units)
    walks = [_Walk(results, text_of, prefix, library, registry, replaced, mine, entry, closed)
             for entry, mine in groups if mine]
    walks = tuple(w for w in walks if w.ok) if all(w.ok for w in walks) else ()
    for entry, mine in groups:
        if not any(is_open(f) for i in mine for f in results[i].findings):
            continue
        results = _review_entry(results, text_of, prefix, library, registry, replaced, mine, entry, closed, walks)
    return results
