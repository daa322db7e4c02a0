"""benchmarks/make_results.py --merge (gsprestore_lab.results_page.merge_rows): rows scored
with ``--weights M=FILE`` count as the shipped method's rows only when FILE is byte for byte the
shipped weights (same SHA-256)."""

from __future__ import annotations

import json

from gsprestore_lab import results_page as mr
from gsprestore.methods.weights import manifest_entry


def test_merge_relabels_rows_of_the_shipped_weights_only(tmp_path):
    shipped = manifest_entry("ugtv", "demosaic")["sha256"]
    proto = {"task": "demosaic", "dataset": "mcm", "noise": {"sigma": 0.0}}
    stored = {"protocol": proto, "results": [
        {"method": "ugtv", "noise_sigma": 0.0, "psnr_dataset_mse": 30.0},
        {"method": "menon", "noise_sigma": 0.0, "psnr_dataset_mse": 32.68}]}
    (tmp_path / "demosaic-mcm.json").write_text(json.dumps(stored))
    new = {"protocol": proto, "results": [
        {"method": "ugtv@run/model.pt", "noise_sigma": 0.0, "psnr_dataset_mse": 34.5,
         "weights": {"path": "run/model.pt", "sha256": shipped, "shipped": False}},
        {"method": "uglr@run/other.pt", "noise_sigma": 0.0, "psnr_dataset_mse": 34.1,
         "weights": {"path": "run/other.pt", "sha256": "0" * 64, "shipped": False}}]}
    src = tmp_path / "new.json"
    src.write_text(json.dumps(new))
    target = mr.merge_rows(src, tmp_path)
    rows = {r["method"]: r for r in json.loads(target.read_text())["results"]}
    # the shipped file's row replaced the stored ugtv row; the other file's row keeps its label
    assert rows["ugtv"]["psnr_dataset_mse"] == 34.5 and rows["ugtv"]["weights"]["shipped"] is True
    assert "uglr@run/other.pt" in rows and "uglr" not in rows
    assert rows["menon"]["psnr_dataset_mse"] == 32.68


def test_merge_relabels_an_ensemble_row_only_when_every_member_is_shipped(tmp_path):
    sha = {m: manifest_entry(m, "demosaic")["sha256"] for m in ("ugtv", "uglr")}
    proto = {"task": "demosaic", "dataset": "kodak", "noise": {"sigma": 0.0}}

    def row(label, ugtv_sha):
        members = {"ugtv": {"path": "run/model.pt", "sha256": ugtv_sha, "shipped": False},
                   "uglr": {"path": "weights/uglr_demosaic.pt", "sha256": sha["uglr"], "shipped": True}}
        return {"method": label, "noise_sigma": 0.0, "psnr_dataset_mse": 38.9,
                "weights": {"members": members, "shipped": False, "path": "ugtv=run/model.pt"}}

    src = tmp_path / "new.json"
    src.write_text(json.dumps({"protocol": proto, "results": [row("ensemble@ugtv=run/model.pt", sha["ugtv"])]}))
    rows = {r["method"]: r for r in json.loads(mr.merge_rows(src, tmp_path).read_text())["results"]}
    assert set(rows) == {"ensemble"}
    assert rows["ensemble"]["weights"]["shipped"] is True and rows["ensemble"]["weights"]["path"] is None
    assert all(r["shipped"] for r in rows["ensemble"]["weights"]["members"].values())

    # a member that is not the shipped file keeps the row's own label
    (tmp_path / "demosaic-kodak.json").unlink()
    src.write_text(json.dumps({"protocol": proto, "results": [row("ensemble@ugtv=run/other.pt", "0" * 64)]}))
    rows = {r["method"]: r for r in json.loads(mr.merge_rows(src, tmp_path).read_text())["results"]}
    assert set(rows) == {"ensemble@ugtv=run/other.pt"}
