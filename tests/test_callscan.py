"""The static call scan (tests/callscan.py) follows ``self.method`` through class hierarchies.

A base class's template method (``FilePublisher.publish`` calling
``self.publish_one``) runs the subclass's override, and a subclass calling
``self.helper`` runs what it inherits; a scan that missed either would report a
granted action as never called, or miss a call the role must grant. A registry filled from above
(a composition root's ``register_publisher("ssm", "topocast.aws.ssm_publish:from_inputs")``) reaches
its entry where the registry is read, and only there.
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

from callscan import CallScanner


def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / name).write_text(dedent(text))
    return root


def test_template_method_reaches_the_subclass_override(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "base.py": """
                class Publisher:
                    def publish(self):
                        return self.publish_one()

                    def publish_one(self):
                        raise NotImplementedError

                    def current(self):
                        return self.ssm.get_parameter(Name="x")
            """,
            "ssm.py": """
                from pkg.base import Publisher

                class SsmPublisher(Publisher):
                    def publish_one(self):
                        self.current()
                        return self.ssm.put_parameter(Name="x", Value="y")
            """,
            "entry.py": """
                from pkg.ssm import SsmPublisher

                def handler():
                    return SsmPublisher().publish()
            """,
        },
    )
    result = CallScanner(root, package="pkg").scan(root / "pkg" / "entry.py", "handler")
    assert result.problems == []
    assert set(result.actions) == {"ssm:PutParameter", "ssm:GetParameter"}
    assert result.actions["ssm:PutParameter"] == {"pkg.ssm:SsmPublisher.publish_one"}
    assert result.actions["ssm:GetParameter"] == {"pkg.base:Publisher.current"}


def test_an_unrelated_class_with_the_same_method_is_not_reached(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "base.py": """
                class Publisher:
                    def publish(self):
                        return self.publish_one()

                    def publish_one(self):
                        raise NotImplementedError

                class Unrelated:
                    def publish_one(self):
                        return self.ssm.delete_parameter(Name="x")

                class Sub(Publisher):
                    def publish_one(self):
                        return self.s3.put_object(Bucket="b", Key="k", Body=b"")
            """,
            "entry.py": """
                from pkg.base import Sub

                def handler():
                    return Sub().publish()
            """,
        },
    )
    result = CallScanner(root, package="pkg").scan(root / "pkg" / "entry.py", "handler")
    assert set(result.actions) == {"s3:PutObject"}, "self.publish_one must not reach a class outside the hierarchy"


def test_a_registration_reaches_its_entry_only_where_the_registry_is_read(tmp_path: Path) -> None:
    files = {
        "registry.py": """
            TABLE = {}

            def register(name, target):
                TABLE[name] = target

            def build(name):
                return TABLE[name]
        """,
        "root.py": """
            from topocast.registry import register

            register("ssm", "topocast.ssm_publish:make")

            def publish_handler():
                from topocast.registry import build

                return build("ssm")

            def render_handler():
                return None
        """,
        "ssm_publish.py": """
            def make(ssm):
                return ssm.put_parameter(Name="x", Value="y")
        """,
    }
    pkg = tmp_path / "topocast"  # registry entries name ``topocast.`` modules
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / name).write_text(dedent(text))
    publish = CallScanner(tmp_path).scan_module("topocast.root", ["publish_handler"])
    assert set(publish.actions) == {"ssm:PutParameter"}
    render = CallScanner(tmp_path).scan_module("topocast.root", ["render_handler"])
    assert render.actions == {}, "a stage that never reads the registry does not reach what was registered"
