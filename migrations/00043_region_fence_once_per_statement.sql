-- +goose Up
-- The region fence checks the epoch once per client statement, not once
-- per write statement. A client statement that writes several tables (a
-- function such as hold_reserve writes seven, a data-modifying CTE two)
-- fired the fence's statement trigger on each, and each read region_epoch
-- again within the same client statement. The check is remembered, in a
-- transaction-local setting, under the client statement's start time
-- (statement_timestamp(), set anew for every statement a client sends);
-- the next client statement, in the same transaction or not, reads the
-- epoch again. So what the fence promises is unchanged: every statement a
-- client sends after `boxoffice fence` raised the epoch is refused. A
-- raise that commits while a client statement runs could already be
-- missed by a check made before it (the check never blocked the raise);
-- that window is still one statement.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION region_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine      text := current_setting('boxoffice.region_epoch', true);
    stmt      text;
    cur_epoch bigint;
BEGIN
    IF mine IS NULL OR mine = '' THEN
        RETURN NULL;
    END IF;
    stmt := statement_timestamp()::text;
    IF current_setting('boxoffice.region_fence_checked', true) = stmt THEN
        RETURN NULL;
    END IF;
    SELECT epoch INTO cur_epoch FROM region_epoch;
    IF mine::bigint <> cur_epoch THEN
        RAISE EXCEPTION 'fenced: this process is on region epoch %, the current epoch is %', mine, cur_epoch
            USING ERRCODE = 'BXF01';
    END IF;
    -- An assignment, not PERFORM: PL/pgSQL evaluates it without a query.
    stmt := set_config('boxoffice.region_fence_checked', stmt, true);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION region_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    mine    text := current_setting('boxoffice.region_epoch', true);
    cur_epoch bigint;
BEGIN
    IF mine IS NULL OR mine = '' THEN
        RETURN NULL;
    END IF;
    SELECT epoch INTO cur_epoch FROM region_epoch;
    IF mine::bigint <> cur_epoch THEN
        RAISE EXCEPTION 'fenced: this process is on region epoch %, the current epoch is %', mine, cur_epoch
            USING ERRCODE = 'BXF01';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
