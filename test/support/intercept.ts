import type { Driver } from 'jobtable'

type Method = { [K in keyof Driver]-?: Driver[K] extends (...args: never[]) => Promise<unknown> ? K : never }[keyof Driver]

/**
 * Wraps a real driver so that the first call of `method`, once the real
 * driver has answered it, runs `then` with that answer before the caller
 * sees it: a write of another process landing between two statements of
 * one operation. Every other call goes straight to the real driver.
 * `fired()` tells whether it ran.
 */
export function afterFirstCall<M extends Method>(
  real: Driver,
  method: M,
  then: (answer: Awaited<ReturnType<Driver[M]>>) => Promise<void>,
): { driver: Driver; fired: () => boolean } {
  let fired = false
  const driver = new Proxy(real, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown
      if (typeof value !== 'function') return value
      if (prop !== method) return (value as (...a: unknown[]) => unknown).bind(target)
      return async (...args: unknown[]) => {
        const answer = (await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)) as Awaited<ReturnType<Driver[M]>>
        if (!fired) {
          fired = true
          await then(answer)
        }
        return answer
      }
    },
  })
  return { driver, fired: () => fired }
}
