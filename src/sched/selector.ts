import { canonicalJson } from './hash.ts'
import type { LabelSelector, SelectorRequirement } from './view.ts'

type Labels = Record<string, string> | undefined

const has = (labels: Labels, key: string): boolean => labels !== undefined && Object.hasOwn(labels, key)

function matchRequirement(labels: Labels, r: SelectorRequirement): boolean {
  const present = has(labels, r.key)
  const v = present ? labels![r.key]! : undefined
  switch (r.operator) {
    case 'In':
      return present && (r.values ?? []).includes(v!)
    case 'NotIn':
      return !present || !(r.values ?? []).includes(v!)
    case 'Exists':
      return present
    case 'DoesNotExist':
      return !present
    case 'Gt':
    case 'Lt': {
      if (!present) return false
      const a = Number(v)
      const b = Number(r.values?.[0])
      if (!Number.isFinite(a) || !Number.isFinite(b)) return false
      return r.operator === 'Gt' ? a > b : a < b
    }
    default:
      return false
  }
}

/** Does a label set satisfy the selector? An empty selector matches everything. */
export function matchSelector(labels: Labels, sel: LabelSelector): boolean {
  if (sel.matchLabels) {
    for (const k in sel.matchLabels) {
      if (!has(labels, k) || labels![k] !== sel.matchLabels[k]) return false
    }
  }
  if (sel.matchExpressions) {
    for (const r of sel.matchExpressions) if (!matchRequirement(labels, r)) return false
  }
  return true
}

/** Does `labels` contain every key=value of `required` (a nodeSelector)? */
export function matchLabels(labels: Labels, required: Record<string, string> | undefined): boolean {
  if (!required) return true
  for (const k in required) if (!has(labels, k) || labels![k] !== required[k]) return false
  return true
}

/** `app=web,tier in (a,b)` — for explanations. */
export function formatSelector(sel: LabelSelector): string {
  const parts: string[] = []
  for (const k of Object.keys(sel.matchLabels ?? {}).sort()) parts.push(`${k}=${sel.matchLabels![k]}`)
  for (const r of sel.matchExpressions ?? []) {
    const vals = (r.values ?? []).join(',')
    switch (r.operator) {
      case 'In':
        parts.push(`${r.key} in (${vals})`)
        break
      case 'NotIn':
        parts.push(`${r.key} notin (${vals})`)
        break
      case 'Exists':
        parts.push(r.key)
        break
      case 'DoesNotExist':
        parts.push(`!${r.key}`)
        break
      case 'Gt':
        parts.push(`${r.key}>${vals}`)
        break
      case 'Lt':
        parts.push(`${r.key}<${vals}`)
        break
    }
  }
  return parts.length === 0 ? '<all>' : parts.join(',')
}

/** A stable identity for a selector, whatever the key order it was written in. */
export function selectorKey(sel: LabelSelector): string {
  return canonicalJson(sel)
}
