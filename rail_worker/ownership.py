"""Is this shard still the merchant's? Asked inside every admit transaction (SPEC §15, ADR 0014).

The map a shard's ledger accepted (`interlock shards apply` wrote it under the write lock, ledger.ownership) is
the authority: a Decision for a merchant it gives another shard — one that waited in this shard's Redis while
the merchant moved, or one a stale ingress or gate worker routed here — is refused before anything is recorded
as an intent. A worker given INTERLOCK_SHARDS also holds its own copy of the map: while that copy differs from
the ledger's the worker re-reads the file when it changes, and refuses every admission until they agree (a
stale process must restart, or the ledger has not accepted the map it was given). Without any map there is one
shard and nothing to fence.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from interlock.errors import ConfigError
from interlock.shards import Ownership, load_shard_map
from ledger import ownership

logger = logging.getLogger(__name__)

SHARD_NOT_OWNER = "SHARD_NOT_OWNER"  # the map gives the merchant another shard: nothing recorded, repeat the call
SHARD_MAP_STALE = "SHARD_MAP_STALE"  # this worker's map is not the one its ledger accepted: it admits nothing


@dataclass
class OwnershipFence:
    shard: str
    map_path: Path | None = None  # INTERLOCK_SHARDS, re-read when it changes while it disagrees with the ledger
    held: Ownership | None = None  # the map this process loaded
    _stat: tuple[int, int] | None = field(default=None, repr=False)

    @classmethod
    def load(cls, shard: str, map_path: Path | None) -> OwnershipFence:
        fence = cls(shard, map_path)
        if map_path is not None:
            fence._reload()
            if fence.held is not None and shard not in fence.held.names:
                raise ConfigError(f"INTERLOCK_SHARD={shard} is not a shard of {map_path} "
                                  f"({', '.join(fence.held.names)})", variable="INTERLOCK_SHARD")  # fmt: skip
        return fence

    def refusal(self, conn: sqlite3.Connection, merchant_id: str) -> str | None:
        """None when this shard owns *merchant_id*; else the reason code to refuse its Decision with."""
        accepted = ownership.accepted(conn)
        if accepted is None:  # no map accepted by this ledger yet: the process's own map (if any) decides
            return None if self.held is None or self.held.shard_of(merchant_id) == self.shard else SHARD_NOT_OWNER
        if accepted.shard != self.shard:
            logger.error("this rail worker serves shard %s but its ledger belongs to shard %s: admitting nothing",
                         self.shard, accepted.shard)  # fmt: skip
            return SHARD_MAP_STALE
        if self.held is not None and self.held.digest != accepted.digest:
            self._reload()
            if self.held is None or self.held.digest != accepted.digest:
                logger.error("shard %s: this process holds shard map epoch %s, the ledger accepted epoch %s "
                             "(%s): admitting nothing until they agree; restart this rail worker with the "
                             "applied map", self.shard, self.held.epoch if self.held else "?", accepted.epoch,
                             self.map_path)  # fmt: skip
                return SHARD_MAP_STALE
        return None if accepted.ownership.shard_of(merchant_id) == self.shard else SHARD_NOT_OWNER

    def _reload(self) -> None:
        assert self.map_path is not None
        try:
            st = self.map_path.stat()
        except OSError as exc:
            logger.warning("cannot stat the shard map %s: %s", self.map_path, exc)
            return
        stat = (st.st_mtime_ns, st.st_size)
        if stat == self._stat:
            return  # unchanged since it was last read
        try:
            self.held = load_shard_map(self.map_path).ownership
        except ConfigError as exc:
            logger.error("cannot reload the shard map %s: %s", self.map_path, exc)
            if self._stat is None:
                raise  # at boot a broken map is a configuration error, as it is for every actor
            return
        self._stat = stat
        logger.info("shard %s: holding shard map %s epoch %s", self.shard, self.map_path, self.held.epoch)
