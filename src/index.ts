/**
 * jobtable: durable background jobs in which a database table is the
 * queue. Import a driver from `jobtable/sqlite` (or `jobtable/postgres`)
 * and hand it to a Runner.
 */
export { Runner, jobEnqueueChannel, jobStartChannel, jobEndChannel, jobPublishChannel, claimErrorChannel, databaseErrorChannel } from './runner/runner.js'
export type {
  RunnerOptions,
  StopOptions,
  Kind,
  TxOf,
  TxResult,
  JobEvent,
  EnqueueOptions,
  UniqueEnqueue,
  JobSpec,
  ListOptions,
  JobPage,
  RetentionOptions,
  RetentionAge,
  RetentionByStatus,
  KindRetention,
  PruneOptions,
  JobEnqueueMessage,
  JobStartMessage,
  JobEndMessage,
  EndStatus,
  ClaimErrorMessage,
  DatabaseErrorMessage,
  DatabaseOperation,
  RateLimitState,
  Activity,
  ActivityOptions,
} from './runner/runner.js'
export { defineKind } from './kind.js'
export type { ScheduleDefinition, ScheduleEnqueueOptions, ScheduleInfo, MissedTicks } from './schedule.js'
export type { JobContext, KindDefinition, KindDef, KindOptions, Handler, HandlerErrorHook, RetryOptions, KindLimit, RateLimitOptions, RateLimitedOptions } from './kind.js'
export type { Logger } from './logger.js'
export type { CancelResult, RetryNowResult, QueueNowResult, ScheduleAdvance, JobCount, WakeReason, Driver, DriverBase, DriverHotPath, DriverMaintenance, DriverPresence, DriverAdmin, DriverWakeups, DriverCapabilities, LivenessCapability, NewJob, InsertResult, ClaimedJob, ClaimParams, FinishAndClaimParams, FinishAndClaimResult, JobFinish, JobRow, JobListParams, QueueCount, KindRule, RateRule, Cooldown, RateUse, JobActivity } from './driver.js'
export {
  type Job,
  type JobStatus,
  type TerminalStatus,
  type JsonValue,
  JOB_STATUSES,
  TERMINAL_STATUSES,
  CODE_INTERNAL,
  CODE_INTERRUPTED,
  CODE_UNKNOWN_KIND,
  CODE_TIMEOUT,
  FAILURE_CODE_PATTERN,
  FINAL_WRITE_TIMEOUT_MS,
  RETRY_MIN_MS,
  RETRY_MAX_MS,
  finalWriteSignal,
} from './job.js'
export {
  JobtableError,
  ConfigError,
  InvalidArgumentError,
  InvalidCursorError,
  RegistrationError,
  RunnerStateError,
  UnknownKindError,
  InvalidPayloadError,
  JobNotFoundError,
  JobNotRunningError,
  ResultNotPublicError,
  DatabaseError,
  SchemaVersionError,
  SchemaBehindError,
  JobFailure,
  JobSnooze,
  JobRateLimited,
  type PayloadIssue,
} from './errors.js'
