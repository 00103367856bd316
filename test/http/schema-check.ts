import { openApiDocument } from 'jobtable/http'

/**
 * A small structural check of a value against the JSON Schema subset the
 * OpenAPI document uses (type, enum, required, properties,
 * additionalProperties: false, items, lengths, bounds, format uuid, $ref).
 * No validator is installed; this one fails on any keyword it does not
 * know, so the document cannot drift into what it cannot check.
 */
type Schema = Record<string, unknown>
const KNOWN = new Set(['type', 'enum', 'required', 'properties', 'additionalProperties', 'items', 'minLength', 'maxLength', 'minimum', 'maximum', 'format', '$ref', 'description', 'default'])
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

export function check(value: unknown, schema: Schema, at = '$'): string[] {
  for (const key of Object.keys(schema)) if (!KNOWN.has(key)) return [`${at}: schema keyword ${key} not supported by the check`]
  if (typeof schema.$ref === 'string') {
    const name = schema.$ref.replace('#/components/schemas/', '')
    const target = (openApiDocument.components.schemas as Record<string, Schema>)[name]
    if (!target) return [`${at}: unresolved ${schema.$ref}`]
    return check(value, target, at)
  }
  const errors: string[] = []
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? (schema.type as string[]) : [schema.type as string]
    if (!types.some((t) => typeOk(value, t))) return [`${at}: expected ${types.join('|')}`]
  }
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) errors.push(`${at}: not in enum`)
  if (typeof value === 'string') {
    if (typeof schema.minLength === 'number' && value.length < schema.minLength) errors.push(`${at}: too short`)
    if (typeof schema.maxLength === 'number' && value.length > schema.maxLength) errors.push(`${at}: too long`)
    if (schema.format === 'uuid' && !UUID.test(value)) errors.push(`${at}: not a uuid`)
  }
  if (typeof value === 'number') {
    if (typeof schema.minimum === 'number' && value < schema.minimum) errors.push(`${at}: below minimum`)
    if (typeof schema.maximum === 'number' && value > schema.maximum) errors.push(`${at}: above maximum`)
  }
  if (Array.isArray(value) && schema.items) value.forEach((v, i) => errors.push(...check(v, schema.items as Schema, `${at}[${i}]`)))
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const record = value as Record<string, unknown>
    const props = (schema.properties ?? {}) as Record<string, Schema>
    for (const name of (schema.required ?? []) as string[]) if (!(name in record)) errors.push(`${at}.${name}: required`)
    for (const [name, v] of Object.entries(record)) {
      if (props[name]) errors.push(...check(v, props[name], `${at}.${name}`))
      else if (schema.additionalProperties === false) errors.push(`${at}.${name}: not allowed`)
    }
  }
  return errors
}

function typeOk(value: unknown, type: string): boolean {
  switch (type) {
    case 'null':
      return value === null
    case 'array':
      return Array.isArray(value)
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value)
    case 'integer':
      return Number.isInteger(value)
    default:
      return typeof value === type
  }
}

/** The document's template for a concrete path, e.g. /api/v1/jobs/{id}; undefined for a route it does not list. */
export function templateOf(path: string): string | undefined {
  return Object.keys(openApiDocument.paths).find((t) => new RegExp('^' + t.replace(/\{[^}]+\}/g, '[^/]+') + '$').test(path))
}

/**
 * Checks a real response against the document: its status must be listed
 * for the operation, its media type among the listed ones, and its body
 * must fit the schema. Returns the mismatches (empty when it conforms).
 * An unlisted route or method must answer a problem.
 */
export function conforms(method: string, path: string, status: number, contentType: string, body: string): string[] {
  const template = templateOf(path)
  const operations = template ? (openApiDocument.paths as Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema: Schema }> }> }>>)[template] : undefined
  const operation = operations?.[method.toLowerCase() === 'head' ? 'get' : method.toLowerCase()]
  if (!operation) {
    return contentType.startsWith('application/problem+json') && [404, 405].includes(status) ? problemErrors(body) : [`unlisted ${method} ${path} answered ${status} ${contentType}`]
  }
  const response = operation.responses[String(status)]
  if (!response) return [`${method} ${template}: status ${status} not documented`]
  // A documented answer without content (204) must have no body.
  if (response.content === undefined) return body === '' ? [] : [`${method} ${template} ${status}: a body where none is documented`]
  const media = contentType.split(';')[0]!.trim()
  const content = response.content?.[media]
  if (!content) return [`${method} ${template} ${status}: media type ${media} not documented`]
  if (media === 'text/event-stream' || media === 'text/plain' || method === 'HEAD') return []
  return check(JSON.parse(body), content.schema)
}

function problemErrors(body: string): string[] {
  return check(JSON.parse(body), { $ref: '#/components/schemas/Problem' })
}
