-- Dead shards and possession rows (index.ShardLifecycle; docs/decisions.md, "Dead shards").
-- dedup_shard: a shard's sweep deletes the dedup entries naming it.
CREATE INDEX dedup_shard ON dedup(shard);
-- possession_xorb: a xorb's sweep deletes every scope's possession row of it.
CREATE INDEX possession_xorb ON possession(xorb);
-- files: a shard's files (n × 32 bytes), so the collector needs no body to know them; NULL for
-- shards registered before this version (the collector then reads the body).
ALTER TABLE shards ADD COLUMN files BLOB;
-- condemned_shards: dead shards (no visible file, every offered xorb condemned or gone) since at
-- (unix ns).
CREATE TABLE condemned_shards (
    shard BLOB PRIMARY KEY,
    at    INTEGER NOT NULL
) WITHOUT ROWID;
-- Possession rows of xorbs swept before this version (PutXorb of a swept xorb drops its swept
-- row and inserts its xorb row in one write, so swept-and-not-indexed means gone).
DELETE FROM possession WHERE EXISTS (SELECT 1 FROM swept s WHERE s.xorb = possession.xorb)
    AND NOT EXISTS (SELECT 1 FROM xorbs x WHERE x.hash = possession.xorb);
