-- expect_rows: an assertion a statement makes on the server. It returns
-- actual when it equals expected and otherwise raises assert_failure
-- (SQLSTATE P0004) naming what, which aborts the transaction.
--
-- A write whose row count is only a check can so be deferred
-- (db.Deferring: sent with the transaction's next statement or its
-- COMMIT, no round trip of its own) and still stop the commit when the
-- check fails: a check made in Go, after the results came back, would be
-- too late for a COMMIT sent in the same request.
--
-- This file is the function's only definition; migrations.Up applies it
-- on every run (see hold_reserve.sql for what a change of signature
-- needs).
CREATE OR REPLACE FUNCTION expect_rows(actual bigint, expected bigint, what text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF actual IS DISTINCT FROM expected THEN
        RAISE EXCEPTION '%: % rows, expected %', what, actual, expected
            USING ERRCODE = 'assert_failure';
    END IF;
    RETURN actual;
END
$$;
