"""The kernel: loading, start order, failure handling, dispose, reconcile, rollback."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import plugins_fixture as fx
import pytest

from dsh.core.errors import CapabilityError, ConfigError, PluginError
from dsh.runtime.kernel import loader
from dsh.runtime.kernel.builtin_plugins import BUILTIN_PLUGINS
from dsh.runtime.kernel.kernel import Kernel, KernelState, RowState

MOD = fx.__name__


@pytest.fixture(autouse=True)
def _journal() -> None:
    fx.JOURNAL.clear()


def row(row_id: str, plugin: str = "Recorder", *, inject: tuple[str, ...] = (),
        disabled: bool = False, **config: Any) -> dict[str, Any]:
    return {"id": row_id, "name": f"{MOD}:{plugin}", "config": config,
            "disabled": disabled, "inject": list(inject)}


def kernel(rows: list[dict[str, Any]], **kwargs: Any) -> Kernel:
    return Kernel(rows, profile="test", home="/nonexistent/home", cwd="/nonexistent/cwd",
                  env={"X": "1"}, **kwargs)


def running(rows: list[dict[str, Any]]) -> Kernel:
    k = kernel(rows)
    k.load()
    asyncio.run(k.start())
    fx.JOURNAL.clear()
    return k


def phases(*kinds: str) -> list[tuple[str, str]]:
    return [entry for entry in fx.JOURNAL if entry[0] in kinds]


# -- load -----------------------------------------------------------------------------


def test_load_and_apply_have_no_side_effects(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    k = kernel([row("t", "Touch", path=str(marker))])
    k.load()
    assert not marker.exists()
    assert k.state is KernelState.LOADED
    assert k.row_states() == {"t": RowState.LOADED}
    assert [tool.name for tool in k.context.tools.list()] == ["touch"]

    async def lifecycle() -> None:
        await k.start()
        assert marker.read_text(encoding="utf-8") == "started"
        await k.dispose()

    asyncio.run(lifecycle())
    assert k.state is KernelState.DISPOSED
    assert len(k.context.tools) == 0


def test_disabled_rows_are_never_imported() -> None:
    rows = [row("a"), {"id": "off", "name": "no_such_module_at_all:Plugin", "disabled": True}]
    k = kernel(rows)
    k.load()
    assert "no_such_module_at_all" not in sys.modules
    assert k.row_states() == {"a": RowState.LOADED, "off": RowState.DISABLED}


def test_undeclared_capability_fails_at_load() -> None:
    with pytest.raises(CapabilityError, match="did not declare capability: lifecycle") as info:
        kernel([row("u", "UndeclaredHook")]).load()
    assert "row 'u'" in str(info.value)
    assert info.value.row_id == "u"


@pytest.mark.parametrize(("plugin", "capability"), [("UndeclaredContext", "prompt"),
                                                    ("UndeclaredToolSource", "tool")])
def test_run_time_extension_points_need_their_capability(plugin: str, capability: str) -> None:
    with pytest.raises(CapabilityError, match=f"did not declare capability: {capability}"):
        kernel([row("u", plugin)]).load()


def test_duplicate_hook_name_fails_at_load() -> None:
    with pytest.raises(PluginError, match="hook 'twice' twice"):
        kernel([row("d", "DuplicateHook")]).load()


def test_unknown_event_fails_at_load() -> None:
    with pytest.raises(PluginError, match="unknown event 'before_lunch'"):
        kernel([row("e", "UnknownEvent")]).load()


def test_registering_after_apply_is_refused() -> None:
    k = kernel([row("late", "LateRegistrar")])
    k.load()
    with pytest.raises(PluginError, match="after apply"):
        asyncio.run(k.start())


def test_foreign_exception_in_apply_becomes_plugin_error() -> None:
    with pytest.raises(PluginError, match=r"row 'x' .* failed to load: KeyError") as info:
        kernel([row("x", "Exploding")]).load()
    assert isinstance(info.value.__cause__, KeyError)


def test_unknown_plugin_name_is_a_config_error() -> None:
    k = kernel([{"id": "X", "name": "no-such-plugin"}])
    with pytest.raises(ConfigError) as info:
        k.load()
    assert str(info.value) == ("row 'X': unknown plugin 'no-such-plugin' "
                               "(not an entry point in dsh.plugins nor module:attr)")
    assert info.value.exit_code == 2
    assert k.state is KernelState.FAILED


def test_missing_module_or_attribute_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown plugin 'nowhere_xyz:P' \(no module"):
        kernel([{"id": "a", "name": "nowhere_xyz:P"}]).load()
    with pytest.raises(ConfigError, match=f"unknown plugin '{MOD}:Nope'"):
        kernel([{"id": "a", "name": f"{MOD}:Nope"}]).load()


def test_module_failing_to_import_is_a_plugin_error(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_plugin_mod.py").write_text("import missing_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="row 'b': plugin 'broken_plugin_mod:P' failed to "
                                          "import: ModuleNotFoundError") as info:
        kernel([{"id": "b", "name": "broken_plugin_mod:P"}]).load()
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert info.value.exit_code == 1


def test_object_without_manifest_is_not_a_plugin() -> None:
    with pytest.raises(PluginError, match="is not a dsh plugin"):
        kernel([row("n", "NOT_A_PLUGIN")]).load()


def test_entry_point_names_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = tmp_path / "fake_dsh_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-dsh-plugins\n"
                                   "Version: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[dsh.plugins]\nfake-recorder = {MOD}:Recorder\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loader.entry_point_table.cache_clear()
    try:
        assert loader.resolve("r", "fake-recorder") is fx.Recorder
    finally:
        loader.entry_point_table.cache_clear()


def test_builtin_table_is_consulted_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(BUILTIN_PLUGINS, "test-recorder", f"{MOD}:Recorder")
    assert loader.resolve("r", "test-recorder") is fx.Recorder


def test_schema_failure_names_row_and_field() -> None:
    with pytest.raises(ConfigError) as info:
        kernel([{"id": "llm", "name": f"{MOD}:Typed", "config": {"timeout": "soon"}}]).load()
    assert str(info.value) == "row 'llm' config.timeout: expected number"


def test_config_defaults_are_filled() -> None:
    k = kernel([{"id": "llm", "name": f"{MOD}:Typed"}])
    k.load()
    assert k._slots["llm"].plugin.config == {"timeout": 30}


def test_malformed_rows_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="row id 'a' appears twice"):
        kernel([row("a"), row("a")]).load()
    with pytest.raises(ConfigError, match="row 'a' inject: expected a list"):
        kernel([{"id": "a", "name": "x:y", "inject": "svc"}]).load()
    with pytest.raises(ConfigError, match="no valid 'id'"):
        kernel([{"name": "x:y"}]).load()


def test_missing_service_provider_names_row_and_service() -> None:
    with pytest.raises(ConfigError, match="row 'a' needs service 'db', but no enabled row "
                                          "provides it"):
        kernel([row("a", inject=("db",))]).load()


def test_disabled_provider_counts_as_missing() -> None:
    with pytest.raises(ConfigError, match="service 'db'"):
        kernel([row("db", provides=["db"], disabled=True), row("a", inject=("db",))]).load()


def test_inject_cycle_names_the_rows() -> None:
    rows = [row("a", provides=["sa"], inject=("sb",)), row("b", provides=["sb"], inject=("sa",))]
    with pytest.raises(ConfigError, match="cycle between rows: 'a' -> 'b' -> 'a'"):
        kernel(rows).load()


def test_two_providers_of_one_service() -> None:
    with pytest.raises(ConfigError, match="service 'db' is provided by both row 'a' and row 'b'"):
        kernel([row("a", provides=["db"]), row("b", provides=["db"])]).load()


def test_duplicate_tool_names_across_rows() -> None:
    with pytest.raises(PluginError, match="tool 'grep' is registered by both row 'a' and row 'b'"):
        kernel([row("a", tools=["grep"]), row("b", tools=["grep"])]).load()


# -- start / dispose ------------------------------------------------------------------


def test_providers_start_first_and_dispose_last() -> None:
    k = kernel([row("app", inject=("db",), uses=["db"]), row("db", provides=["db"]),
                row("solo")])
    k.load()
    asyncio.run(k.start())
    assert phases("start") == [("start", "db"), ("start", "app"), ("start", "solo")]
    assert k._slots["app"].plugin.seen == {"db": fx.Service("db", None)}
    assert k.context.service("db") == fx.Service("db", None)
    assert k.state is KernelState.RUNNING
    errors = asyncio.run(k.dispose())
    assert errors == []
    assert phases("dispose") == [("dispose", "solo"), ("dispose", "app"), ("dispose", "db")]
    with pytest.raises(PluginError, match="no service 'db'"):
        k.context.service("db")


def test_manifest_requires_orders_start() -> None:
    k = kernel([row("n", "Needy"), row("db", provides=["db"])])
    k.load()
    asyncio.run(k.start())
    assert phases("start") == [("start", "db"), ("start", "n")]


def test_start_failure_disposes_started_rows_in_reverse() -> None:
    k = kernel([row("a"), row("b"), row("c", fail_start=True), row("d")])
    k.load()
    with pytest.raises(PluginError, match="row 'c' failed to start: RuntimeError: c refuses"):
        asyncio.run(k.start())
    assert fx.JOURNAL == [("start", "a"), ("start", "b"), ("start", "c"),
                          ("dispose", "b"), ("dispose", "a")]
    assert k.state is KernelState.FAILED
    assert k.row_states() == {"a": RowState.DISPOSED, "b": RowState.DISPOSED,
                              "c": RowState.FAILED, "d": RowState.LOADED}
    assert len(k.context.hooks.hooks("before_turn")) == 0


def test_publishing_undeclared_service_fails_start() -> None:
    k = kernel([row("u", "Undeclared")])
    k.load()
    with pytest.raises(PluginError, match="published service 'ghost' without declaring"):
        asyncio.run(k.start())


def test_declared_but_unpublished_service_fails_start() -> None:
    k = kernel([row("s", "Silent")])
    k.load()
    with pytest.raises(PluginError, match="declared service 'quiet' but did not publish"):
        asyncio.run(k.start())
    assert fx.JOURNAL == [("dispose", "s")]


def test_kernel_context_cannot_publish() -> None:
    with pytest.raises(PluginError, match="only be published from the start"):
        kernel([]).context.publish("x", object())


def test_dispose_continues_past_failing_and_hanging_rows() -> None:
    k = running([row("a"), row("b", fail_dispose=True), row("c", hang_dispose=True)])
    errors = asyncio.run(k.dispose(timeout=0.1))
    assert fx.JOURNAL == [("dispose", "c"), ("dispose", "b"), ("dispose", "a")]
    assert [str(e) for e in errors] == [
        "row 'c' did not dispose within 0.1 s",
        "row 'b' failed to dispose: RuntimeError: b cannot let go",
    ]
    assert k.state is KernelState.DISPOSED
    assert asyncio.run(k.dispose()) == []


def test_lifecycle_misuse_names_the_state() -> None:
    k = kernel([row("a")])
    with pytest.raises(PluginError, match="cannot start: kernel is new"):
        asyncio.run(k.start())
    k.load()
    with pytest.raises(PluginError, match="cannot load: kernel is loaded"):
        k.load()
    with pytest.raises(PluginError, match="cannot reconcile: kernel is loaded"):
        asyncio.run(k.reconcile([]))


# -- context, commands, hooks ---------------------------------------------------------


def test_context_exposes_the_launch_and_registries() -> None:
    k = running([row("app", "App"), row("t", tools=["grep", "read"])])
    ctx = k.context
    assert (ctx.profile, ctx.home, ctx.cwd, ctx.env["X"]) == (
        "test", "/nonexistent/home", "/nonexistent/cwd", "1")
    assert ctx.tools.get("grep") == fx.FakeTool("grep")
    assert ctx.tools.get("nope") is None
    assert [t.name for t in ctx.tools.list()] == ["grep", "read"]
    assert ctx.prompts["persona"].text == "You are a test."
    assert ctx.skills["testing"].description == "how to test"
    main = k.command("main")
    assert asyncio.run(main.run(ctx, ["x", "y"])) == 2
    assert len(ctx.guardrails) == 0


def test_missing_command_names_profile() -> None:
    k = kernel([row("a")])
    k.load()
    with pytest.raises(PluginError) as info:
        k.command("main")
    assert str(info.value) == ("profile 'test' has no application: "
                               "no row registers command 'main'")


def test_hook_errors_reach_listeners_and_the_turn_goes_on() -> None:
    k = kernel([row("h", "Hooked")], hook_budget=0.2)
    k.load()
    errors: list[Any] = []

    async def turn() -> None:
        await k.start()
        k.context.hooks.add_error_listener(errors.append)
        await asyncio.wait_for(k.context.hooks.emit("after_turn", session_id="s1"), 30)
        await k.dispose()

    asyncio.run(turn())
    assert [e.message for e in errors] == [
        "hook 'explodes' raised on after_turn: ValueError: kaboom",
        "hook 'slow' exceeded its 0.2 s budget on after_turn",
    ]
    assert all(e.row_id == "h" and e.session_id == "s1" for e in errors)
    assert fx.JOURNAL == [("fine", "s1")]


# -- reconcile ------------------------------------------------------------------------


def test_reconcile_untouched_update_replace_add_remove() -> None:
    k = running([row("keep"), row("tune", tag=1), row("swap"), row("gone")])
    keep, tune = k._slots["keep"].plugin, k._slots["tune"].plugin
    diff = asyncio.run(k.reconcile([
        row("keep"), row("tune", tag=2), row("swap", "OtherRecorder"), row("new"),
    ]))
    assert (diff.kept, diff.updated, diff.replaced, diff.added, diff.removed) == (
        {"keep"}, {"tune"}, {"swap"}, {"new"}, {"gone"})
    assert fx.JOURNAL == [("update", "tune"), ("dispose", "gone"), ("dispose", "swap"),
                          ("start", "swap"), ("start", "new")]
    assert k._slots["keep"].plugin is keep
    assert k._slots["tune"].plugin is tune and tune.config["tag"] == 2
    assert isinstance(k._slots["swap"].plugin, fx.OtherRecorder)
    assert list(k.row_states()) == ["keep", "tune", "swap", "new"]
    assert k.state is KernelState.RUNNING


def test_reconcile_update_declined_replaces() -> None:
    k = running([row("r", tag=1)])
    old = k._slots["r"].plugin
    asyncio.run(k.reconcile([row("r", tag=2, in_place=False)]))
    assert fx.JOURNAL == [("update", "r"), ("dispose", "r"), ("start", "r")]
    assert k._slots["r"].plugin is not old


def test_reconcile_inject_change_and_disable_flag() -> None:
    k = running([row("db", provides=["db"]), row("a"), row("b")])
    asyncio.run(k.reconcile([row("db", provides=["db"]), row("a", inject=("db",)),
                             row("b", disabled=True)]))
    assert fx.JOURNAL == [("dispose", "b"), ("dispose", "a"), ("start", "a")]
    assert k.row_states()["b"] is RowState.DISABLED
    asyncio.run(k.reconcile([row("db", provides=["db"]), row("a", inject=("db",)), row("b")]))
    assert fx.JOURNAL[-1] == ("start", "b")


def test_replacing_a_provider_restarts_its_dependents() -> None:
    k = running([row("db", provides=["db"], tag="v1"), row("app", inject=("db",), uses=["db"]),
                 row("bystander")])
    asyncio.run(k.reconcile([row("db", provides=["db"], tag="v2", in_place=False),
                             row("app", inject=("db",), uses=["db"]), row("bystander")]))
    assert fx.JOURNAL == [("update", "db"), ("dispose", "app"), ("dispose", "db"),
                          ("start", "db"), ("start", "app")]
    assert k._slots["app"].plugin.seen["db"] == fx.Service("db", "v2")


def test_reconcile_removes_hooks_of_disposed_rows() -> None:
    k = running([row("a"), row("b")])

    async def turn() -> None:
        await k.context.hooks.emit("before_turn")

    asyncio.run(turn())
    assert phases("hook") == [("hook", "a"), ("hook", "b")]
    asyncio.run(k.reconcile([row("a")]))
    fx.JOURNAL.clear()
    asyncio.run(turn())
    assert phases("hook") == [("hook", "a")]


def test_reconcile_checks_before_touching_anything() -> None:
    k = running([row("a")])
    with pytest.raises(ConfigError, match="needs service 'db'"):
        asyncio.run(k.reconcile([row("a", inject=("db",)), row("b")]))
    with pytest.raises(ConfigError, match="unknown plugin"):
        asyncio.run(k.reconcile([row("a"), {"id": "z", "name": "no-such-plugin"}]))
    assert fx.JOURNAL == []
    assert k.state is KernelState.RUNNING


def test_reconcile_rollback_restores_previous_tree() -> None:
    k = running([row("db", provides=["db"], tag="v1"), row("app", inject=("db",), uses=["db"]),
                 row("tune", tag=1, tools=["t1"]), row("gone", tools=["g"])])
    before_tools = [t.name for t in k.context.tools.list()]
    with pytest.raises(PluginError, match="row 'boom' failed to start") as info:
        asyncio.run(k.reconcile([
            row("db", "OtherRecorder", provides=["db"], tag="v2"),
            row("app", inject=("db",), uses=["db"]),
            row("tune", tag=2, tools=["t1"]),
            row("boom", fail_start=True),
        ]))
    assert info.value.row_id == "boom"
    assert fx.JOURNAL == [
        ("update", "tune"),
        ("dispose", "gone"), ("dispose", "app"), ("dispose", "db"),
        ("start", "db"), ("start", "app"), ("start", "boom"),
        # rollback: new instances out, update undone, old tree back in start order
        ("dispose", "app"), ("dispose", "db"),
        ("update", "tune"),
        ("start", "db"), ("start", "app"), ("start", "gone"),
    ]
    assert k.state is KernelState.RUNNING
    assert all(state is RowState.RUNNING for state in k.row_states().values())
    assert list(k.row_states()) == ["db", "app", "tune", "gone"]
    assert type(k._slots["db"].plugin) is fx.Recorder
    assert k.context.service("db") == fx.Service("db", "v1")
    assert k._slots["app"].plugin.seen["db"] == fx.Service("db", "v1")
    assert k._slots["tune"].plugin.config["tag"] == 1
    assert [t.name for t in k.context.tools.list()] == before_tools
    # the restored tree reconciles normally afterwards
    asyncio.run(k.reconcile([row("db", provides=["db"], tag="v1")]))
    assert list(k.row_states()) == ["db"]


def test_reconcile_rollback_after_failed_update() -> None:
    k = running([row("a", tag=1), row("b", tag=1)])
    with pytest.raises(PluginError, match="row 'b' failed to update: RuntimeError"):
        asyncio.run(k.reconcile([row("a", tag=2), row("b", tag=2, fail_update=True)]))
    assert fx.JOURNAL == [("update", "a"), ("update", "b"), ("update", "b"), ("update", "a")]
    assert k._slots["a"].plugin.config["tag"] == 1
    assert k.state is KernelState.RUNNING


def test_start_context_sees_the_launch_the_kernel_was_given() -> None:
    k = kernel([row("p", "Peek")], launch="the-launch")
    k.load()
    asyncio.run(k.start())
    assert fx.JOURNAL == [("launch", "the-launch")]
