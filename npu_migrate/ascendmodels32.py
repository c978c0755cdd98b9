"""vLLM models vllm-ascend replaces with its own implementation: review-level notes (issue #16,
audit round 32 GB#29, GB#37, GB#38, GC#15, GC#19, GC#20, GC#25, GC#36, GC#37, GC#39). Whole run,
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


def _review_entry(results, text_of, prefix, library, registry, replaced, members, entry,
                  closed: frozenset = frozenset()) -> list:
    """`review` for the members of one `[[models]]` entry; `closed`: indices of registry files whose
    dotted strings the plugin's platform never resolves (wave 34)."""
    from .modpaths import module_names

    package = ascendfacts30.Package(results, text_of, members, instances=True)
    modules = {name for i in members for name in module_names(results[i].relpath)}
    routes = _open_routes(results, text_of, registry, replaced, modules, package.names)
    if routes is None:
        return results
    of = {i: entry for i in members}
    whole, seeds = _plugin_seeds(results, prefix, members, of)
    # (the registry stays an outside file: an import or a dotted string there still reaches)
    inside = set(members)
    # (wave 34, round 33 HC#19: the attention backend registry, whose strings NPUPlatform never
    # resolves, reaches nothing)
    outside = [j for j in library if j not in inside and j not in closed]
    reached = package.reached(outside, whole, frozenset(routes) | seeds)
    if reached is None:
        return results
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
    # only such routes reach is opt-in (policy P1), info naming the drafts and the fact)
    tables = frozenset(ascendfacts30.facts().get("draft_routes", {}).get("tables", ()))
    drafts = {name: sorted(a for a, t in places if t in tables) for name, places in routes.items()}
    main = frozenset(n for n, places in routes.items() if any(t not in tables for _a, t in places))
    if not tables or main == frozenset(routes):
        return results
    plain = ascendfacts30.Package(results, text_of, members, instances=True)
    kept = plain.reached(outside, whole, main | seeds)
    if kept is None:
        return results

    named = ", ".join(f'"{a}"' for a in sorted({a for n, archs in drafts.items() if n not in main for a in archs}))

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
    for entry in entries:
        mine = [i for i in members if of[i] is entry]
        if not any(is_open(f) for i in mine for f in results[i].findings):
            continue
        results = _review_entry(results, text_of, prefix, library, registry, replaced, mine, entry, closed)
    return results
