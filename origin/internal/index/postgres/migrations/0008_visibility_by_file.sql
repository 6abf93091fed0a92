-- Visibility keyed by (file, scope), the per-scope lookups through an index on scope alone
-- (docs/decisions.md, "Visibility keyed by (file, scope)"). A registration's visibility rows
-- then go into one random-key index, not two: the primary key's entries are as random as the
-- old visibility_file's, but the scope index's new entries, equal keys ordered by heap position,
-- land at the end of their scope's run, on a page the registrations of that scope keep cached.
-- Every (scope, file) probe stays a primary-key probe; "visible in any scope" is a prefix of it.
-- Rebuilding both indexes holds an exclusive lock on visibility for the migration's duration
-- (docs/origin.md, "Upgrading": about N s at 10^7 rows on 2 cores).
ALTER TABLE visibility DROP CONSTRAINT visibility_pkey;
DROP INDEX visibility_file;
ALTER TABLE visibility ADD CONSTRAINT visibility_pkey PRIMARY KEY (file, scope);
CREATE INDEX visibility_scope ON visibility(scope);
