"""Importers that turn a source (pre-release TSV, TorchNeuron's compatibility table, the dispatcher
registrations of an installed torch_neuronx) into an opdb `Snapshot`. Each returns a Snapshot; writing it is
the caller's job."""
