/**
 * Every SQL statement the SQLite driver runs, in one place. Times are
 * milliseconds since the epoch, passed in from the runner's clock.
 */

export const insertJob = `
  INSERT INTO jobtable_jobs (id, kind, payload, scope, created_at, updated_at)
  VALUES (@id, @kind, @payload, @scope, @now, @now)`

/**
 * One statement claims jobs for every idle worker. SQLite serializes
 * writers, so the subquery's rows cannot be claimed by anyone else between
 * the SELECT and the UPDATE: no job is claimed twice. The subquery walks
 * the partial index jobtable_jobs_queued, so finished rows cost nothing.
 */
export const claimJobs = `
  UPDATE jobtable_jobs
     SET status = 'running', attempt = attempt + 1, runner_id = @runnerId,
         started_at = @now, updated_at = @now
   WHERE seq IN (SELECT seq FROM jobtable_jobs WHERE status = 'queued' ORDER BY seq LIMIT @limit)
  RETURNING seq, id, kind, payload, attempt`

/** Fenced: applies only while the job is running under the same claim. */
export const publishResult = `
  UPDATE jobtable_jobs SET result = @result, updated_at = @now
   WHERE id = @id AND status = 'running' AND attempt = @attempt`

/** Fenced like publishResult; a null result keeps the last partial one. */
export const finishJob = `
  UPDATE jobtable_jobs
     SET status = @status, result = coalesce(@result, result), error = @error,
         finished_at = @now, updated_at = @now
   WHERE id = @id AND status = 'running' AND attempt = @attempt`

/** Every process on one SQLite file shares one machine; a starting runner fails what its predecessors left running. */
export const failInterrupted = `
  UPDATE jobtable_jobs SET status = 'failed', error = @error, finished_at = @now, updated_at = @now
   WHERE status = 'running'`

export const getJob = `SELECT id, kind, status, result, error FROM jobtable_jobs WHERE id = @id`

/** As getJob, only within one owner scope: another scope's job reads as missing. */
export const getScopedJob = `SELECT id, kind, status, result, error FROM jobtable_jobs WHERE id = @id AND scope IS @scope`

/**
 * A page of jobs, newest first, before a seq cursor. Each filter applies
 * only when its parameter is set (@anyScope = 1 lists every scope).
 */
export const listJobs = `
  SELECT seq, id, kind, status, result, error FROM jobtable_jobs
   WHERE seq < @before
     AND (@anyScope = 1 OR scope IS @scope)
     AND (@status IS NULL OR status = @status)
     AND (@kind IS NULL OR kind = @kind)
   ORDER BY seq DESC
   LIMIT @limit`
