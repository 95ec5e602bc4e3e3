import type {
  DeletedFinalStateUnknown,
  InformerEventHandler,
  SharedInformer,
} from '@userspace-proxy/core';

/**
 * A view of a {@link SharedInformer} that shows only the objects `filter` accepts, as client-go's
 * FilteringResourceEventHandler does: an update that makes an object match is an add, one that
 * makes it stop matching is a delete of the old object. It is how an integrator's informer, which
 * may watch every Service, is held to kube-proxy's selectors. It has no `run()`: the informer's
 * owner runs it.
 */
export class FilteringInformer<T> implements SharedInformer<T> {
  readonly #inner: SharedInformer<T>;
  readonly #filter: (obj: T) => boolean;

  constructor(inner: SharedInformer<T>, filter: (obj: T) => boolean) {
    this.#inner = inner;
    this.#filter = filter;
  }

  /** Registers `handler` with the informer behind, through the filter. */
  addEventHandler(handler: InformerEventHandler<T>): void {
    const pass = (obj: T) => {
      try {
        return this.#filter(obj);
      } catch {
        return false; // a malformed object; core's fan-out reports those it receives
      }
    };
    this.#inner.addEventHandler({
      onAdd: (obj) => {
        if (pass(obj)) handler.onAdd(obj);
      },
      onUpdate: (old, obj) => {
        const was = pass(old);
        const is = pass(obj);
        if (was && is) handler.onUpdate(old, obj);
        else if (is) handler.onAdd(obj);
        else if (was) handler.onDelete(old);
      },
      onDelete: (obj) => {
        const tombstone = obj as DeletedFinalStateUnknown<T>;
        const final =
          typeof obj === 'object' && obj !== null && 'key' in obj && 'obj' in obj
            ? tombstone.obj
            : (obj as T);
        if (pass(final)) handler.onDelete(obj);
      },
    });
  }

  /** The informer behind's own answer. */
  hasSynced(): boolean {
    return this.#inner.hasSynced();
  }
}
