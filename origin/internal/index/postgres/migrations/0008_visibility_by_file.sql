-- Visibility keyed by (file, scope), the per-scope lookups through an index on scope alone
-- (docs/decisions.md, "Visibility keyed by (file, scope)"). A registration's visibility rows
-- then go into one random-key index, not two: the primary key's entries are as random as the
-- old visibility_file's, but the scope index's new entries, equal keys ordered by heap position,
-- land at the end of their scope's run, on a page the registrations of that scope keep cached.
-- Every (scope, file) probe stays a primary-key probe; "visible in any scope" is a prefix of it.
--
-- Building the two indexes here holds an exclusive lock on visibility (no download or
-- registration proceeds) for about a minute at 10^7 rows. An operator who built them beforehand
-- without that lock (docs/origin.md, "Upgrading to migration 0008":
-- CREATE UNIQUE INDEX CONCURRENTLY visibility_file_scope ON visibility(file, scope);
-- CREATE INDEX CONCURRENTLY visibility_scope ON visibility(scope)) leaves only the swap below.
-- An index such a build left invalid (interrupted) is built again.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('visibility_file_scope') AND NOT indisvalid) THEN
        DROP INDEX visibility_file_scope;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('visibility_scope') AND NOT indisvalid) THEN
        DROP INDEX visibility_scope;
    END IF;
END $$;
CREATE UNIQUE INDEX IF NOT EXISTS visibility_file_scope ON visibility(file, scope);
CREATE INDEX IF NOT EXISTS visibility_scope ON visibility(scope);
ALTER TABLE visibility DROP CONSTRAINT visibility_pkey;
-- Renames visibility_file_scope to visibility_pkey.
ALTER TABLE visibility ADD CONSTRAINT visibility_pkey PRIMARY KEY USING INDEX visibility_file_scope;
DROP INDEX visibility_file;
