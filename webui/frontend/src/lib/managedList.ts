// A list the owner manages on one page (the household's accounts, its access points): loaded from the web UI,
// and loaded again after each change to it, a failure's message shown in its place.
import { onMounted, ref, type Ref } from 'vue'
import { api, errorMessage } from '../api'

// A code another box types to join the household (a wall panel, an access point): valid for minutes.
export interface PairingCode { code: string; expires: number }

export function useManagedList<T>(path: string, field: string) {
  const items = ref([]) as Ref<T[]>
  const error = ref('')

  async function load() {
    try {
      items.value = (await api<Record<string, T[]>>('GET', path))[field]
    } catch (e) {
      error.value = errorMessage(e)
    }
  }

  // A change (a request), then the list as it is after it.
  async function run(change: () => Promise<unknown>) {
    error.value = ''
    try {
      await change()
      await load()
    } catch (e) {
      error.value = errorMessage(e)
    }
  }

  onMounted(load)
  return { items, error, run }
}
