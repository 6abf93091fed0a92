-- Registration cost at 10^7 files (docs/decisions.md, "Shard registration: visibility(file) as a
-- hash index"). visibility_file serves only equality lookups by file (the collector's Files
-- scan, Sweep's re-check, dropping dead file rows), never an order or a range, and every
-- registration inserts each of its files into it at a random place. As a hash index its
-- entries are a 4-byte hash code and a row pointer instead of the whole 32-byte key: about a
-- third of the pages, no tree to descend per insert, so more of it stays in the buffer cache
-- and fewer of its pages are written again (full-page images) after each checkpoint. Hash
-- indexes are WAL-logged and crash-safe since PostgreSQL 10.
DROP INDEX visibility_file;
CREATE INDEX visibility_file ON visibility USING hash (file);
