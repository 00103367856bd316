/**
 * A kinds module that fails with the secret marker (JT_SECRET_MARKER) as
 * its error's message, name, code and cause: at import when
 * JT_SECRET_FAIL is `import`, else in registerKinds. For the secret-marker
 * test of the `jobtable` command's own error line.
 */
const marker = process.env['JT_SECRET_MARKER'] ?? 'unset'
const failure = () => Object.assign(new Error(marker, { cause: new Error(marker) }), { name: marker, code: marker })
if (process.env['JT_SECRET_FAIL'] === 'import') throw failure()

export function registerKinds(): void {
  throw failure()
}
