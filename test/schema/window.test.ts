/**
 * The version window's rule (src/schema-window.ts), as a table: which
 * code runs on which schema under each mode, and which migrations are
 * recorded where releases before the window read.
 */
import { describe, expect, it } from 'vitest'
import { ConfigError, SchemaBehindError, SchemaVersionError } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { postgres } from 'jobtable/postgres'
import { decide, LEGACY_VERSION, recordedInLegacy, windowStarts } from '../../src/schema-window.js'

describe('the schema version window', () => {
  it('code runs on its own schema, migrates an older one (or refuses it under verify), runs on a newer one inside the window and refuses one outside', () => {
    expect(decide({ version: 13, compatibleFrom: 12 }, 13, 'auto')).toBe('run')
    expect(decide(undefined, 13, 'auto')).toBe('migrate')
    expect(decide({ version: 11, compatibleFrom: 11 }, 13, 'auto')).toBe('migrate')
    expect(() => decide({ version: 11, compatibleFrom: 11 }, 13, 'verify')).toThrow(SchemaBehindError)
    expect(() => decide(undefined, 13, 'verify')).toThrow(SchemaBehindError)
    expect(decide({ version: 15, compatibleFrom: 13 }, 13, 'auto')).toBe('run')
    expect(decide({ version: 15, compatibleFrom: 13 }, 13, 'verify')).toBe('run')
    expect(() => decide({ version: 15, compatibleFrom: 14 }, 13, 'auto')).toThrow(SchemaVersionError)
    expect(() => decide({ version: 15, compatibleFrom: 14 }, 13, 'auto')).toThrow('deploy a jobtable release of schema version 14 or newer')
    // off trusts the operator: nothing is read, nothing refused.
    expect(decide({ version: 99, compatibleFrom: 99 }, 13, 'off')).toBe('run')
  })

  it('an additive migration keeps the window before it, a contract moves it up; only a move past the legacy version is written where old releases read', () => {
    const starts = windowStarts([
      ...Array.from({ length: LEGACY_VERSION }, (_, i) => ({ version: i + 1 })),
      { version: 13, compatibleFrom: 12 },
      { version: 14 },
      { version: 15, compatibleFrom: 14 },
      { version: 16 },
    ])
    expect([...starts.entries()].slice(LEGACY_VERSION - 1)).toEqual([
      [12, 12],
      [13, 12],
      [14, 12],
      [15, 14],
      [16, 14],
    ])
    expect([12, 13, 14, 15, 16].map((v) => recordedInLegacy(v, starts.get(v)!))).toEqual([true, false, false, true, true])
    expect(() => windowStarts([{ version: 13, compatibleFrom: 14 }])).toThrow(/compatibleFrom 14 is after it/)
  })

  it("the drivers' migrate option takes auto, verify or off, and refuses anything else by name", () => {
    expect(() => sqlite({ path: ':memory:', migrate: 'sometimes' as never })).toThrow(new ConfigError("sqlite: migrate must be 'auto', 'verify' or 'off'"))
    expect(() => postgres({ connectionString: 'postgres://127.0.0.1/none', migrate: true as never })).toThrow(new ConfigError("postgres: migrate must be 'auto', 'verify' or 'off'"))
  })
})
