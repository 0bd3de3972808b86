"""The console over a shard map (SPEC §15): the intent list gathers every shard's intents, each row naming
its shard; an intent's page reads its merchant's shard; the audit page shows one shard's chain at a time."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from console.app import create_app
from interlock.config import load_settings
from interlock.shards import load_shard_map
from ops.context import OpsContext
from tests.mandates import EXAMPLE
from tests.ops.test_sharded_ops import shard_map  # noqa: F401 - the two-shard fixture

TOKEN = "console-shards-token-1c9e"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def client_for(shard_map_path: Path) -> TestClient:
    settings = load_settings(shards=shard_map_path, mandate=EXAMPLE, redis_url=None, ledger=None)
    return TestClient(create_app(OpsContext.from_settings(settings), TOKEN), headers=BEARER)


def test_the_intent_list_shows_every_shards_intents_with_their_shard(shard_map: Path) -> None:  # noqa: F811
    with client_for(shard_map) as http:
        page = http.get("/").text
    shards = [cell.split("<")[0] for cell in page.split('<td class="shard">')[1:]]
    assert sorted(shards) == ["a", "a", "b", "b"]
    assert "<th>Shard</th>" in page


def test_an_intents_page_reads_its_merchants_shard_only_and_the_audit_page_each_chain(
    shard_map: Path,  # noqa: F811
) -> None:
    # Both fixture ledgers hold intents of acc_DEMO000001 (which a map would never allow): the page must find
    # the one in the shard the map routes that merchant to, and never look in the other ledger.
    home = load_shard_map(shard_map).shard_of("acc_DEMO000001")
    other = "b" if home == "a" else "a"
    with client_for(shard_map) as http:
        found = http.get(f"/intents/acc_DEMO000001/{home.upper()}0".ljust(len("/intents/acc_DEMO000001/") + 32, "A"))
        elsewhere = http.get(f"/intents/acc_DEMO000001/{other.upper()}0".ljust(len("/intents/acc_DEMO000001/") + 32,
                                                                               "A"))  # fmt: skip
        audit_a, audit_b = http.get("/audit").text, http.get("/audit?shard=b").text
    assert found.status_code == 200 and f'<dd id="intent-shard">{home}</dd>' in found.text
    assert elsewhere.status_code == 404
    assert '<span id="audit-shard">a</span>' in audit_a and '<span id="audit-shard">b</span>' in audit_b
    assert 'id="chain-status">chain ok' in audit_a and 'id="chain-status">chain ok' in audit_b
