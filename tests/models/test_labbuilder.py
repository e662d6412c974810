import json

import numpy as np
import pytest

from edgekit.models.lab_layout import (
    Layout,
    check_fits,
    collisions,
    cost,
    geometry,
    greedy_layout,
    metrics,
    out_of_bounds,
    plan,
    plot_plan,
    repair,
    safety_violations,
    to_json,
)
from edgekit.models.lab_protocol import asset_table, generate_spec, parse_spec, read_with_server

SPEC = """Room: 8 x 6 m
Robot: 0.5 m
Step 1: Warm the buffer using hot plate, balance with ethanol, tris_buffer.
Step 2: Neutralise using fume_hood with hydrochloric_acid, sodium_hydroxide.
Step 3: Sterilise using autoclave.
"""


def test_the_specification_becomes_steps_equipment_reagents_and_cabinets():
    p = parse_spec(SPEC)
    assert p.room == (8.0, 6.0) and p.robot == 0.5 and len(p.steps) == 3
    assert p.steps[0].equipment == ("hot_plate", "balance")
    assert p.reagents == ["ethanol", "hydrochloric_acid", "sodium_hydroxide", "tris_buffer"]
    assert p.cabinets() == ["acid_cabinet", "base_cabinet", "flammables_cabinet", "general_cabinet"]
    assert generate_spec(7) == generate_spec(7) != generate_spec(8)


def test_bad_specifications_say_what_is_wrong():
    with pytest.raises(ValueError, match="'laser_cutter'.*Known equipment"):
        parse_spec("Room: 8 x 6 m\nStep 1: Cut using laser_cutter.\n")
    with pytest.raises(ValueError, match="reagent 'unobtainium'"):
        parse_spec("Room: 8 x 6 m\nStep 1: Mix using balance with unobtainium.\n")
    with pytest.raises(ValueError, match="Room: W x D m"):
        parse_spec("Step 1: Mix using balance.\n")
    with pytest.raises(ValueError, match="no steps"):
        parse_spec("Room: 8 x 6 m\n")
    small = parse_spec("Room: 3 x 2 m\nStep 1: x using fume_hood, autoclave, freezer, biosafety_cabinet.\n")
    with pytest.raises(ValueError, match="too small.*fume_hood 1.35 m2"):
        check_fits(small)
    with pytest.raises(ValueError, match="methods"):
        plan(parse_spec(SPEC), "clever")


def _layout(floor, bench_of=None, spec=SPEC):
    return Layout(parse_spec(spec), {k: [k.split("#")[0], *v] for k, v in floor.items()}, bench_of or {})


def test_footprints_turn_and_collisions_and_bounds_are_found():
    a = asset_table()["fume_hood"]
    lay = _layout({"fume_hood": (3.0, 3.0, 1), "autoclave": (3.2, 3.0, 0), "fridge": (-0.2, 1.0, 0)})
    geo = geometry(lay)
    minx, miny, maxx, maxy = geo["shapes"]["fume_hood"].bounds
    assert (maxx - minx, maxy - miny) == pytest.approx((a.depth, a.width))  # a quarter turn swaps them
    assert collisions(lay, geo) == {"fume_hood", "autoclave"}
    assert out_of_bounds(lay, geo) == {"fridge"}
    fixed = repair(lay)
    geo = geometry(fixed)
    assert not collisions(fixed, geo) and not out_of_bounds(fixed, geo)


def test_bench_overflow_counts_as_a_collision():
    spec = "Room: 8 x 6 m\nStep 1: x using centrifuge, microscope, spectrophotometer, water_bath.\n"
    lay = _layout({"lab_bench#1": (4.0, 3.0, 0)}, {e: "lab_bench#1" for e in
                                                   ("centrifuge", "microscope", "spectrophotometer", "water_bath")}, spec)
    assert "water_bath" in collisions(lay, geometry(lay))  # 0.6 + 0.5 + 0.5 + 0.5 and gaps exceed 2 m


def test_safety_separations_are_weighted_and_measured_between_footprints():
    near = _layout({"flammables_cabinet": (2.0, 3.0, 0), "autoclave": (3.5, 3.0, 0)})
    broken = safety_violations(geometry(near))
    assert [(v["classes"], v["weight"]) for v in broken] == [(["flammable", "heat_source"], 3.0)]
    assert broken[0]["distance"] == pytest.approx(1.5 - 0.55 - 0.4)
    far = _layout({"flammables_cabinet": (1.0, 3.0, 0), "autoclave": (6.0, 3.0, 0)})
    assert safety_violations(geometry(far)) == []


def test_a_robot_cannot_reach_equipment_behind_a_row_of_benches():
    spec = "Room: 4 x 4 m\nStep 1: Sterilise using autoclave.\n"
    open_room = _layout({"autoclave": (2.0, 3.4, 0)}, spec=spec)
    assert metrics(open_room)["reachable_step_fraction"] == 1.0
    walled = _layout({"autoclave": (2.0, 3.4, 0), "lab_bench#1": (1.0, 2.0, 0), "lab_bench#2": (3.0, 2.0, 0)},
                     spec=spec)
    assert metrics(walled)["reachable_step_fraction"] == 0.0


def test_the_optimiser_improves_on_greedy_and_leaves_no_collision(tmp_path):
    protocol = parse_spec(SPEC)
    greedy = greedy_layout(protocol)
    best = plan(protocol, "optimised", seed=0, iterations=150)
    assert cost(best) < cost(greedy)
    m = metrics(best)
    assert m["collision_rate"] == 0 and m["out_of_bounds_rate"] == 0
    assert metrics(greedy)["weighted_safety_violations"] >= m["weighted_safety_violations"]
    out = to_json(best)
    assert {i["id"] for i in out["items"]} >= {"hot_plate", "autoclave", "acid_cabinet"}
    assert out["reagent_storage"]["ethanol"] == "flammables_cabinet"
    json.dumps(out)
    plot_plan(best, tmp_path / "plan.png")
    assert (tmp_path / "plan.png").stat().st_size > 10_000
    assert np.isfinite(cost(plan(protocol, "random", seed=1)))


def test_a_server_reads_free_text_into_the_grammar_and_unknown_names_are_still_refused():
    class Canned:
        def __init__(self, reply):
            self.reply, self.prompt = reply, None

        def complete(self, prompt, seed=None):
            self.prompt = prompt
            return self.reply

    server = Canned(SPEC)
    assert read_with_server(server, "a small lab for buffers") == parse_spec(SPEC)
    assert "hot_plate" in server.prompt and "a small lab for buffers" in server.prompt
    with pytest.raises(ValueError, match="laser_cutter"):
        read_with_server(Canned("Room: 8 x 6 m\nStep 1: Cut using laser_cutter.\n"), "cut things")


def test_edgekit_lab_plan_writes_the_layout_and_the_plan(tmp_path):
    from click.testing import CliRunner

    from edgekit.cli import main

    spec = tmp_path / "spec.txt"
    spec.write_text(SPEC)
    result = CliRunner().invoke(main, ["lab", "plan", str(spec), "--method", "greedy", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    layout = json.loads((tmp_path / "out" / "layout.json").read_text())
    assert layout["room"] == [8.0, 6.0] and (tmp_path / "out" / "plan.png").exists()
    spec.write_text("Room: 8 x 6 m\nStep 1: Cut using laser_cutter.\n")
    result = CliRunner().invoke(main, ["lab", "plan", str(spec), "-o", str(tmp_path / "bad")])
    assert result.exit_code == 1 and "laser_cutter" in result.output
