/**
 * The words the command prints for a database error code, and its guess
 * at a mistyped kind: the codes a test cannot make happen here (a server
 * starting up, a wrong password under trust authentication, a read-only
 * file for root) are named as surely as those the CLI tests meet.
 */
import { describe, expect, it } from 'vitest'
import { databaseErrorWords, shellWord } from '../../src/cli/database-errors.js'
import { editDistance, nearest } from '../../src/cli/suggest.js'

const SECRET = 'SECRET-MARKER-cli-words'
const PG = `postgres://app:${SECRET}@db.internal:6543/prod?sslpassword=${SECRET}&schema=jobs`

describe('databaseErrorWords', () => {
  it('names PostgreSQL codes in words, with the host, port and database, never the credentials or query', () => {
    const words: Record<string, string> = {
      '3D000': 'database "prod" does not exist on db.internal:6543; create it (createdb prod), or fix its name in the URL',
      '28P01': 'password authentication failed at db.internal:6543; check the user and password in the URL (or PGPASSWORD)',
      '28000': 'the server at db.internal:6543 refused the login: the user does not exist, or pg_hba.conf does not let it connect',
      '42501': 'permission denied on database "prod": the user in the URL lacks a privilege jobtable needs (to create its schema and tables when migrating, or to read and write them)',
      '57P03': 'the server at db.internal:6543 is not accepting connections yet (starting up, shutting down or in recovery); try again shortly',
      ECONNREFUSED: 'cannot reach PostgreSQL at db.internal:6543: the connection was refused (is the server running, and listening on that host and port?)',
      ENOTFOUND: 'cannot reach PostgreSQL at db.internal:6543: its host name was not found',
      timeout: 'cannot reach PostgreSQL at db.internal:6543: no answer in time',
      '08006': 'the connection to PostgreSQL at db.internal:6543 failed',
      XX000: 'database error on database "prod" at db.internal:6543',
    }
    for (const [code, text] of Object.entries(words)) {
      const said = databaseErrorWords(code, PG)
      expect(said, code).toBe(text)
      expect(said).not.toContain(SECRET)
      expect(said).not.toContain('app')
    }
  })

  it('takes the default port, a database name that needs decoding or quoting, and a URL without one', () => {
    expect(databaseErrorWords('3D000', 'postgresql://localhost/my%20jobs')).toBe(`database "my jobs" does not exist on localhost:5432; create it (createdb 'my jobs'), or fix its name in the URL`)
    expect(databaseErrorWords('3D000', 'postgres://localhost')).toBe('the database named by the URL does not exist on localhost:5432; create it, or fix its name in the URL')
    expect(databaseErrorWords('ECONNREFUSED', 'postgres:///jobs')).toBe('cannot reach PostgreSQL at the host of PGHOST (default localhost):5432: the connection was refused (is the server running, and listening on that host and port?)')
  })

  it('names SQLite codes, extended ones by their primary code, with the path', () => {
    const words: Record<string, string> = {
      SQLITE_CANTOPEN: 'cannot open the SQLite file ./jobs.db: check that it and its folder can be read and written by this user',
      SQLITE_NOTADB: './jobs.db is not a SQLite database (a file of another kind, or an encrypted one); check the --database path',
      SQLITE_READONLY: './jobs.db is read-only for this process: jobtable writes to the file and to its folder (the -wal and -shm files beside it); check their permissions and the file system',
      SQLITE_READONLY_DBMOVED: './jobs.db is read-only for this process: jobtable writes to the file and to its folder (the -wal and -shm files beside it); check their permissions and the file system',
      SQLITE_BUSY: './jobs.db is locked by another connection (a long transaction, or a tool holding the file open); try again once it is done',
      SQLITE_BUSY_SNAPSHOT: './jobs.db is locked by another connection (a long transaction, or a tool holding the file open); try again once it is done',
      SQLITE_FULL: 'the disk holding ./jobs.db is full',
      SQLITE_MISMATCH: 'database error on ./jobs.db',
    }
    for (const [code, text] of Object.entries(words)) expect(databaseErrorWords(code, './jobs.db'), code).toBe(text)
  })
})

describe('shellWord', () => {
  it('leaves a plain word as it is and single-quotes any other', () => {
    expect(shellWord('./data/jobs.db')).toBe('./data/jobs.db')
    expect(shellWord("my jobs's.db")).toBe(`'my jobs'\\''s.db'`)
  })
})

describe('nearest', () => {
  it('counts insertions, deletions, substitutions and swaps of neighbours as one edit each', () => {
    expect(editDistance('meal_pln', 'meal_plan')).toBe(1)
    expect(editDistance('mael_plan', 'meal_plan')).toBe(1)
    expect(editDistance('meal_plan', 'meal_plan')).toBe(0)
    expect(editDistance('', 'abc')).toBe(3)
    expect(editDistance('kitten', 'sitting')).toBe(3)
  })

  it('suggests the nearest candidate within a third of the word (1 to 3 edits), or none', () => {
    const kinds = ['meal_plan', 'send_email', 'send_sms']
    expect(nearest('meal_pln', kinds)).toBe('meal_plan')
    expect(nearest('send_emial', kinds)).toBe('send_email')
    expect(nearest('send_sm', kinds)).toBe('send_sms')
    expect(nearest('reports', kinds)).toBeUndefined()
    expect(nearest('meal_plan', kinds)).toBeUndefined()
    expect(nearest('x', [])).toBeUndefined()
  })
})
