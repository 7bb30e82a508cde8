-- +goose Up
-- outbox_claim gains p_floor (issue 25, third round): a scan "from the
-- head" starts at the relay's floor, the first seq its last such scan
-- found, instead of at seq 0, so it no longer walks every row published
-- and deleted since the last vacuum (their dead index entries and heap
-- tuples were most of a claim's buffer reads at the tail of the outbox).
-- A true head scan, from seq 0, still runs every headScanEvery claims to
-- pick up what a floor hides: a row committed late with a lower seq, one
-- back from a retry backoff, one of an expired lease.
-- The function is defined in functions/outbox_claim.sql, applied by
-- migrations.Up right after the versioned migrations; this version drops
-- the signature it replaces.
--
-- At upgrade: a relay of the previous version calling the old signature
-- fails its claims (and retries them) until it is replaced; it claims
-- nothing meanwhile, so nothing is published twice or lost, only later.
DROP FUNCTION IF EXISTS outbox_claim(text, integer, interval, boolean);

-- +goose Down
-- The previous signature is recreated by the previous version's
-- migrations.Up; drop this one so the two never coexist.
DROP FUNCTION IF EXISTS outbox_claim(text, integer, interval, boolean, bigint);
