-- +goose Up
-- Region-epoch fencing (docs/design/regions.md). After a regional failover the old
-- primary's processes may still be running; once the operator raises the
-- epoch (`boxoffice fence --epoch N`), every write of a process still on
-- an older epoch is refused by the database itself, whatever code path
-- issues it, so the old region cannot sell a seat the new one sold.
--
-- A Boxoffice process declares its epoch in every session it opens
-- (boxoffice.region_epoch, from BOXOFFICE_REGION_EPOCH). A session that
-- declares none is an operator's (psql, migrations) and is not fenced.
CREATE TABLE region_epoch (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch     bigint NOT NULL CHECK (epoch >= 1),
    raised_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO region_epoch (epoch) VALUES (1);

-- +goose StatementBegin
CREATE FUNCTION region_fence() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- One statement-level trigger per table: one epoch check per write
-- statement, not per row. Every table the migrations created so far;
-- later migrations fence their own tables (migrations_test checks that
-- every table is fenced).
-- +goose StatementBegin
DO $$
DECLARE t text;
BEGIN
    FOR t IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
          AND c.relname NOT IN ('region_epoch', 'goose_db_version')
    LOOP
        EXECUTE format('CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %I
                        FOR EACH STATEMENT EXECUTE FUNCTION region_fence()', t);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE t text;
BEGIN
    FOR t IN
        SELECT c.relname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
        WHERE g.tgname = 'region_fence'
    LOOP
        EXECUTE format('DROP TRIGGER region_fence ON %I', t);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION region_fence();
DROP TABLE region_epoch;
