-- The hold transaction (docs/design/holds.md) as one server-side function,
-- hold_reserve, so a hold costs the API a single round trip and a single
-- statement instead of a straightforward implementation's twelve.
--
-- This version no longer creates it: the function's one definition is
-- functions/hold_reserve.sql, which migrations.Up applies after the
-- versioned migrations on every run. A fresh database therefore gets
-- today's hold_reserve once all versions are applied, and a database that
-- already had this version keeps its function until that file replaces it.

-- +goose Up
-- Nothing: see functions/hold_reserve.sql.

-- +goose Down
-- Drops hold_reserve whatever its signature (a database has one at most),
-- so that a database taken down below this version has none;
-- migrations.Up brings it back.
DROP FUNCTION IF EXISTS hold_reserve;
