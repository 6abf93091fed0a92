-- Registration cost (docs/decisions.md, "Shard registration: dedup entries found by chunk").
-- chunks: the chunks of a shard's dedup entries (n × 32 bytes, sorted), written by every
-- registration, so the collector finds the entries naming a shard by primary-key probes of dedup
-- instead of through an index on dedup(shard). Without that index, a registration taking over an
-- entry (newest wins) changes no indexed column: a heap-only (HOT) update, no new index entries,
-- when its page has room, which the fillfactor leaves.
ALTER TABLE shards ADD COLUMN chunks bytea;
ALTER TABLE shards ALTER COLUMN chunks SET STORAGE EXTERNAL;
-- Existing shards: the entries naming them now (only a registration of the shard itself can make
-- an entry name it again, and that writes its full list: qRegister). One pass over dedup.
UPDATE shards s SET chunks = d.cs
FROM (SELECT shard, string_agg(chunk, ''::bytea ORDER BY chunk) AS cs FROM dedup GROUP BY shard) d
WHERE d.shard = s.hash;
UPDATE shards SET chunks = ''::bytea WHERE chunks IS NULL;
DROP INDEX dedup_shard;
ALTER TABLE dedup SET (fillfactor = 75);
