/**
 * The TypeScript blocks of the documentation, as the files a reader makes
 * of them. The docs follow one convention, which this module enforces:
 *
 * - a block whose first line is `// app.ts` (a path, optionally followed
 *   by `:` or `,` and words) is that whole file, imports included;
 * - a block whose first line is `// continues app.ts` goes at the end of
 *   that earlier file, and may use its names (and import more);
 * - any other block is a whole file of its own.
 *
 * A relative import names another block's file, or a file of the
 * package's examples/ that the text names (the test supplies those).
 */

/** One ```ts (or ```typescript) block: where it is, and its code. */
export interface Block {
  readonly doc: string
  /** The line of the block's first line of code in `doc`, from 1. */
  readonly line: number
  readonly code: string
}

/** A file the blocks make: its text, and where each of its lines came from. */
export interface DocFile {
  /** Its path in the reader's project, such as `kinds.ts` or `src/client.ts`. */
  readonly name: string
  readonly text: string
  /** Its blocks in order; `fileLine` is the block's first line in `text`, from 1. */
  readonly parts: readonly { readonly fileLine: number; readonly doc: string; readonly docLine: number; readonly lines: number }[]
}

const OPEN = /^```(ts|typescript)\s*$/
const FENCE = /^```/
const NAMED = /^\/\/ ((?:[\w.-]+\/)*[\w.-]+\.ts)(?:[:,]\s.*)?$/
const CONTINUES = /^\/\/ continues ((?:[\w.-]+\/)*[\w.-]+\.ts)(?:[:,]\s.*)?$/

/** Every TypeScript block of a Markdown text, in order. Other fences (sh, json, sql) are skipped whole. */
export function extractBlocks(doc: string, markdown: string): Block[] {
  const lines = markdown.split('\n')
  const blocks: Block[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = lines[i]!
    if (!FENCE.test(open)) continue
    const start = i + 1
    let end = start
    while (end < lines.length && !/^```\s*$/.test(lines[end]!)) end++
    if (end === lines.length) throw new Error(`${doc}:${i + 1}: a code fence that never closes`)
    if (OPEN.test(open)) blocks.push({ doc, line: start + 1, code: lines.slice(start, end).join('\n') })
    i = end
  }
  return blocks
}

/** The files the blocks make, in order of their first block. */
export function assemble(blocks: readonly Block[]): DocFile[] {
  const files = new Map<string, { name: string; text: string[]; parts: DocFile['parts'][number][] }>()
  for (const block of blocks) {
    const first = block.code.split('\n', 1)[0]!
    const continued = CONTINUES.exec(first)?.[1]
    const named = continued === undefined ? NAMED.exec(first)?.[1] : undefined
    const name = continued ?? named ?? `${block.doc.replace(/\W+/g, '-').toLowerCase()}-${block.line}.ts`
    let file = files.get(name)
    if (continued !== undefined && file === undefined) throw new Error(`${block.doc}:${block.line - 1}: continues ${continued}, which no earlier block is`)
    if (continued === undefined && file !== undefined) throw new Error(`${block.doc}:${block.line - 1}: a second block named ${name} (a continuation starts with "// continues ${name}")`)
    if (file === undefined) {
      file = { name, text: [], parts: [] }
      files.set(name, file)
    }
    const lines = block.code.split('\n')
    file.parts.push({ fileLine: file.text.length + 1, doc: block.doc, docLine: block.line, lines: lines.length })
    file.text.push(...lines)
  }
  return [...files.values()].map((f) => ({ name: f.name, text: `${f.text.join('\n')}\n`, parts: f.parts }))
}

/** Where line `line` (from 1) of a doc file came from: `README.md:123`. */
export function origin(file: DocFile, line: number): string {
  const part = file.parts.find((p) => line >= p.fileLine && line < p.fileLine + p.lines)
  return part === undefined ? file.name : `${part.doc}:${part.docLine + line - part.fileLine}`
}

/** Where a file's first block is, for messages about the whole file. */
export function firstOrigin(file: DocFile): string {
  const part = file.parts[0]!
  return `${part.doc}:${part.docLine}`
}
