"""What a job shows people: ``summaries`` (TensorBoard: writer, scalars, images, events, curves.png) and
``pictures`` (PNGs: a training batch, the confusion matrix, the most confident mistakes, curves)."""
