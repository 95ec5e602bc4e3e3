/**
 * The {@link SctpListener} both engines hand out (UDP encapsulation and raw IP): the endpoint routes
 * each new association on its port here, and closing it only unhooks it from the endpoint (the
 * associations it accepted live on).
 */
import { EventEmitter } from 'eventemitter3';
import type { Association } from './association.js';
import type { EndpointListener, SctpEndpoint } from './endpoint.js';
import type { SctpListener, SctpListenerEvents } from './engine.js';
import type { ResolvedAssociationOptions } from './options.js';

/** One listening port of an engine; `encapsulationPort` is 0 on raw IP (no UDP underneath). */
export class EngineListener
  extends EventEmitter<SctpListenerEvents>
  implements SctpListener, EndpointListener
{
  associations = 0;
  readonly maxAssociationsPerAddress: number;
  private closed = false;

  constructor(
    private readonly endpoint: SctpEndpoint,
    readonly address: string,
    readonly port: number,
    readonly encapsulationPort: number,
    readonly options: ResolvedAssociationOptions,
    readonly maxAssociations: number,
    maxAssociationsPerAddress: number | undefined,
  ) {
    super();
    this.maxAssociationsPerAddress = maxAssociationsPerAddress ?? maxAssociations;
  }

  get associationCount(): number {
    return this.associations;
  }

  accept(a: Association): void {
    this.emit('association', a);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.endpoint.removePortListener(this.port, this);
  }
}
