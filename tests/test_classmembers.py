"""classmembers.members answers what the per-member walks of callgates21 and capchains30 did."""

import ast

from npu_migrate import classmembers

SOURCE = '''
class Layer(Base):
    kind: str
    self_note: int = 3

    def __init__(self, cfg):
        self.use_fused = False
        self.mlp = Mlp(cfg)
        self.mlp.act = None
        self.kind: str
        self.a, self.b = 1, 2
        self.c = self.d = 0
        self.count += 1
        other.use_fused = True
        del self.scratch

    def later(self):
        self.use_fused = cfg.flag
        def inner():
            self.mlp = Other()
        class Nested:
            def __init__(self):
                self.use_fused = True
'''


def _naive(owner, name):
    assigns = [n for n in ast.walk(owner) if isinstance(n, ast.Assign) and len(n.targets) == 1
               and isinstance(n.targets[0], ast.Attribute) and n.targets[0].attr == name
               and isinstance(n.targets[0].value, ast.Name) and n.targets[0].value.id == "self"]
    stores = [n for n in ast.walk(owner) if isinstance(n, ast.Attribute) and n.attr == name
              and not isinstance(n.ctx, ast.Load)]
    bare = [n for n in ast.walk(owner) if isinstance(n, ast.AnnAssign) and n.value is None
            and isinstance(n.target, ast.Attribute) and n.target.attr == name]
    return assigns, stores, bare


def test_members_match_the_walks_they_replace():
    owner = ast.parse(SOURCE).body[0]
    names = {n.attr for n in ast.walk(owner) if isinstance(n, ast.Attribute)} | {"absent", "kind"}
    for name in sorted(names):
        found = classmembers.members(owner, name)
        assigns, stores, bare = _naive(owner, name)
        assert list(found.self_assigns) == assigns, name
        assert list(found.stores) == stores, name
        assert list(found.bare) == bare, name


def test_members_cover_nested_code_and_every_store_kind():
    owner = ast.parse(SOURCE).body[0]
    fused = classmembers.members(owner, "use_fused")
    assert [a.lineno for a in fused.self_assigns] == [7, 18, 23]  # (nested function and class included)
    assert len(fused.stores) == 4  # (and `other.use_fused = True`, no `self.` assignment)
    assert len(classmembers.members(owner, "scratch").stores) == 1  # (a `del`)
    assert classmembers.members(owner, "count").self_assigns == ()  # (an augmented store)
    assert len(classmembers.members(owner, "count").stores) == 1
    assert classmembers.members(owner, "a").self_assigns == ()  # (a tuple target)
    assert len(classmembers.members(owner, "kind").bare) == 1
    assert classmembers.members(owner, "absent") == classmembers.Members((), (), ())


def test_index_is_per_class_tree():
    first = ast.parse(SOURCE).body[0]
    second = ast.parse(SOURCE.replace("self.use_fused = False", "pass")).body[0]
    assert len(classmembers.members(first, "use_fused").self_assigns) == 3
    assert len(classmembers.members(second, "use_fused").self_assigns) == 2
