-- Shard bodies kept inline with their registration (index.Registration.Body); NULL when the
-- body is in the object store.
ALTER TABLE shards ADD COLUMN body BLOB;
