-- Shard bodies kept inline with their registration (index.Registration.Body); NULL when the
-- body is in the object store. A registration's row stays in the heap page up to ~8 KB
-- (toast_tuple_target), so the small shards of a typical upload cost no TOAST insert and no
-- compression attempt; larger bodies move out of line uncompressed (hashes do not compress).
ALTER TABLE shards ADD COLUMN body bytea;
ALTER TABLE shards ALTER COLUMN body SET STORAGE EXTERNAL;
ALTER TABLE shards SET (toast_tuple_target = 8160);
