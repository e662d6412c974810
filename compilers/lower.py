"""Stage 4, lower: planned weights become packed codes read by fused decode kernels.

Every Linear (``matmul`` with a weight parameter, transposed or not), Conv2d and
Conv1d (``conv2d`` / ``conv1d`` with a weight parameter, groups = 1; a conv1d runs as
the conv2d of height 1) whose layer the plan names is
replaced by a ``call_tir`` to a kernel from ``decode_kernels``: its inputs are the
weight's codes and scales in exactly the simulators' bytes (rearranged, for 4-bit
and 6-bit codes on CPUs, by the verified repacks of ``simulators.layouts``), bound as constants. The
float weight is dropped from the module, so it never exists on the device. Float
baselines (``fp32``, ``fp16``) go through the same kernels with a float weight, so
every layer shares one schedule. All remaining parameters are bound as constants.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import tvm
from tvm import relax

from edgekit.simulators import quantize
from edgekit.simulators import weight_formats as wf
from edgekit.simulators.layouts import PACKED, VECTOR_LAYOUT, layout_applies, to_layout
from edgekit.simulators.liftquant import quantize as liftquant_quantize

from .decode_kernels import conv2d_kernel, dense_kernel, reduction_block
from .importer import ImportedModel
from .kernel_schedules import KERNEL_ATTR, PARALLEL_MIN_WEIGHTS, add_kernel, dense_lanes, vector_isa
from .liftquant_kernels import emit_layer
from .mx_dot_gemv import ACTIVATION as MX_DOT_INPUT
from .mx_dot_gemv import applies as mx_dot_fits
from .mx_dot_gemv import formats_taken as mx_dot_formats
from .mx_dot_gemv import gemv_kernel as mx_dot_kernel
from .mx_dot_gemv import layout as mx_dot_layout
from .mx_dot_gemv import tile_codes as mx_dot_tiles
from .plan import block_format, check_plan, is_liftquant
from .row_tile_gemv import LAYOUT as ROW_TILES
from .row_tile_gemv import applies as row_tiles_fit
from .row_tile_gemv import gemv_kernel as row_tile_kernel
from .row_tile_gemv import tile_rows
from .tir_decode import needs_scale_specials

DEVICES = ("cpu", "cuda")
ACTIVATIONS = ("float32", MX_DOT_INPUT)  # a layer's input: as the model gives it, or quantized (mx_dot_gemv)


@dataclass
class LayerRecord:
    """What one lowered layer stores and how it computes."""

    format: str
    op: str  # "gemv", "gemm", "conv2d" or "conv1d"
    shape: list  # the weight's shape as the model holds it
    layout: str | None
    weights: int  # elements of the weight
    codes_bytes: int
    scales_bytes: int
    tensor_scale_bytes: int
    weight_bits: float  # stored bits per weight, scales included
    activations: str = "float32"  # the input the kernel multiplies: see ACTIVATIONS

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class LoweredModel:
    mod: object  # tvm.IRModule whose main takes only the model inputs
    layers: dict[str, LayerRecord]
    inputs: list[dict]
    outputs: list[dict]
    device: str


def choose_layout(fmt_name: str, device: str, row_elements: int) -> str | None:
    """On CPUs the vector layout of 4- and 6-bit codes where the rows fit it; else the simulators' bytes."""
    if wf.resolve(fmt_name).is_float:
        return None
    if is_liftquant(fmt_name):  # Linear layers take _liftquant_dense before any layout is chosen
        raise ValueError(f"{fmt_name}: LiftQuant is lowered for Linear (matmul) weights only; "
                         "plan convolutions in a block format or a float baseline")
    fmt = block_format(fmt_name)
    vector = VECTOR_LAYOUT.get(fmt.element.bits)
    return vector if device == "cpu" and vector and layout_applies(fmt, vector, row_elements) else PACKED


def weight_constants(fmt_name: str, weight_rows: np.ndarray, layout: str | None):
    """(constants, tensor scale, record fields) of a weight given as rows of input channels.

    ``weight_rows`` has the reduction (input-channel) axis last.
    """
    row = wf.resolve(fmt_name)
    if row.is_float:
        stored = np.ascontiguousarray(weight_rows.astype(row.dtype))
        return [stored], None, {"weights": stored.size, "codes_bytes": stored.nbytes, "scales_bytes": 0,
                                "tensor_scale_bytes": 0, "weight_bits": 8.0 * stored.nbytes / stored.size}
    fmt = block_format(fmt_name)
    q = quantize(np.ascontiguousarray(weight_rows, dtype=np.float32), fmt, axis=-1)
    ts_bytes = 4 if fmt.tensor_scale else 0
    fields = {"weights": q.numel, "codes_bytes": q.codes.nbytes, "scales_bytes": q.scales.nbytes,
              "tensor_scale_bytes": ts_bytes, "weight_bits": 8.0 * q.nbytes / q.numel}
    return [to_layout(q.codes, fmt, layout), q.scales], q.tensor_scale, fields


def _dims(expr) -> list:
    """A tensor's shape: ints where static, the symbolic ``PrimExpr`` (a batch) where not."""
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in expr.ty.shape]


def _static(dim) -> int | None:
    return dim if isinstance(dim, int) else None


@relax.expr_functor.mutator
class _LowerWeights(relax.PyExprMutator):
    def __init__(self, mod, weights: dict[str, tuple[str, np.ndarray]], plan: dict[str, str], device: str,
                 encoded: dict | None = None, target=None, activations: str = "float32"):
        super().__init__(mod)
        self.activations = activations
        self.weights = weights  # weight variable name -> (layer, value)
        self.plan_formats = plan
        self.device = device
        self.encoded = encoded or {}  # layer -> LiftQuantTensor given by the caller (e.g. fine-tuned codes)
        self.records: dict[str, LayerRecord] = {}
        self.target = target  # the build's TVM target: CPU GEMVs for its vector units, CUDA GEMV schedules

    def _param(self, expr):
        """(layer, value, transposed) if ``expr`` is a planned weight, maybe through permute_dims."""
        if isinstance(expr, relax.Var) and expr.name in self.weights:
            return (*self.weights[expr.name], False)
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        if (isinstance(bound, relax.Call) and bound.op == tvm.ir.Op.get("relax.permute_dims")
                and isinstance(bound.args[0], relax.Var) and bound.args[0].name in self.weights):
            axes = bound.attrs.axes
            if axes is None or [int(a) for a in axes] == [1, 0]:
                return (*self.weights[bound.args[0].name], True)
        return None

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        if call.op == tvm.ir.Op.get("relax.matmul"):
            found = self._param(call.args[1])
            if found is not None and len(found[1].shape) == 2:
                return self._dense(call, *found)
        if call.op == tvm.ir.Op.get("relax.nn.conv2d"):
            found = self._param(call.args[1])
            if found is not None and not found[2] and self._plain_conv(call, "NCHW", "OIHW"):
                return self._conv2d(call, found[0], found[1])
        if call.op == tvm.ir.Op.get("relax.nn.conv1d"):
            found = self._param(call.args[1])
            if found is not None and not found[2] and self._plain_conv(call, "NCW", "OIW"):
                return self._conv1d(call, found[0], found[1])
        return call

    @staticmethod
    def _plain_conv(call, data_layout: str, kernel_layout: str) -> bool:
        a = call.attrs
        return (int(a.groups) == 1 and a.data_layout == data_layout and a.kernel_layout == kernel_layout
                and a.out_layout == data_layout)

    def _kernel_constants(self, layer, rows, op, shape):
        fmt_name = self.plan_formats[layer]
        layout = choose_layout(fmt_name, self.device, rows.shape[-1])
        consts, tensor_scale, fields = weight_constants(fmt_name, rows, layout)
        self.records[layer] = LayerRecord(fmt_name, op, list(shape), layout, **fields)
        return fmt_name, layout, [relax.const(c) for c in consts], tensor_scale

    def _dense(self, call, layer, value, transposed):
        x = call.args[0]
        x_shape = _dims(x)
        rows = value if transposed else value.T  # (out, in): reductions along rows
        n, k = rows.shape
        m = math.prod(x_shape[:-1])  # a PrimExpr when the batch is symbolic
        op = "gemv" if m == 1 else "gemm"
        x2 = x if len(x_shape) == 2 else self.builder_.emit(relax.op.reshape(x, (m, k)))
        if is_liftquant(self.plan_formats[layer]):
            if _static(m) is None:
                raise ValueError(f"layer {layer!r}: LiftQuant kernels are built for a fixed batch; compile with a "
                                 "fixed batch (--max-batch 1 or --input-shape) or plan the layer in a block format")
            y = self._liftquant_dense(layer, x2, rows, op, value.shape)
            return y if len(x_shape) == 2 else relax.op.reshape(self.builder_.emit(y), (*x_shape[:-1], n))
        if _static(m) == 1 and row_tiles_apply(self.plan_formats[layer], n, k, self.device, self.target):
            func, consts, ts = self._row_tile_constants(layer, rows, value.shape)
            op_name = "gemv_tiles" if self.records[layer].activations == "float32" else "gemv_mx_dot"
            gv = add_kernel(self.builder_, func, _kernel_name(op_name, self.plan_formats[layer], (1, n, k), layer, ts))
        else:
            fmt_name, layout, consts, ts = self._kernel_constants(layer, rows, op, value.shape)
            gv = add_kernel(self.builder_, dense_function(fmt_name, layout, _static(m), n, k, ts),
                            _kernel_name("dense", fmt_name, (_static(m), n, k), layer, ts))
        y = relax.call_tir(gv, [x2, *consts], relax.TensorType((m, n), "float32"))
        if len(x_shape) == 2:
            return y
        return relax.op.reshape(self.builder_.emit(y), (*x_shape[:-1], n))

    def _row_tile_constants(self, layer, rows, shape):
        """The batch-1 GEMV of ``row_tile_gemv`` for this CPU target (``mx_dot_gemv`` where the input is to
        be quantized and the weight fits it): its kernel, constants and tensor scale."""
        fmt_name = self.plan_formats[layer]
        activations = self.activations if mx_dot_applies(fmt_name, *rows.shape, self.device, self.target) else "float32"
        func, consts, tensor_scale, fields = row_tile_function(fmt_name, rows, self.target, activations)
        layout = ROW_TILES if activations == "float32" else mx_dot_layout(block_format(fmt_name))
        self.records[layer] = LayerRecord(fmt_name, "gemv", list(shape), layout, **fields, activations=activations)
        return func, [relax.const(c) for c in consts], tensor_scale

    def _liftquant_dense(self, layer, x2, rows, op, shape):
        """The LiftQuant layer (simulators' pipeline: rotation, row scales, default search) as
        its rotation and fused decode-GEMV kernels (``liftquant_kernels.emit_layer``)."""
        q = self.encoded.get(layer)
        if q is None:
            q = liftquant_quantize(np.ascontiguousarray(rows, np.float32), self.plan_formats[layer])
        elif q.shape != rows.shape or q.format.name != self.plan_formats[layer]:
            raise ValueError(f"layer {layer!r}: the given codes are {q.format.name} of shape {q.shape}, the model's "
                             f"weight is {tuple(rows.shape)} planned as {self.plan_formats[layer]}")
        layout = "bytes_major" if self.device == "cpu" else "packed"
        self.records[layer] = LayerRecord(q.format.name, op, list(shape), layout, q.numel, q.codes.nbytes,
                                          q.nbytes - q.codes.nbytes, 0, q.bits_per_weight)
        return emit_layer(self.builder_, x2, q, self.device, target=self.target,
                          name=f"{_symbol(q.format.name)}_{rows.shape[0]}x{rows.shape[1]}")

    def _conv2d(self, call, layer, value):
        a = call.attrs
        return self._conv_kernel(layer, "conv2d", call.args[0], value, value.shape,
                                 tuple(int(s) for s in a.strides), tuple(int(p) for p in a.padding),
                                 tuple(int(d) for d in a.dilation), _dims(call))

    def _conv1d(self, call, layer, value):
        """The conv2d kernel over (N, C, 1, W) with an (O, I, 1, K) weight: the same sums, exactly."""
        a = call.attrs
        batch, channels, width = _dims(call.args[0])
        out_shape = _dims(call)
        x = self.builder_.emit(relax.op.reshape(call.args[0], (batch, channels, 1, width)))
        left, right = (int(p) for p in a.padding)
        y = self._conv_kernel(layer, "conv1d", x, value[:, :, None, :], value.shape, (1, int(a.strides[0])),
                              (0, left, 0, right), (1, int(a.dilation[0])), [*out_shape[:2], 1, out_shape[2]])
        return relax.op.reshape(self.builder_.emit(y), out_shape)

    def _conv_kernel(self, layer, op, x, value, shape, strides, padding, dilation, out_shape):
        """``call_tir`` of the conv2d decode kernel for an OIHW ``value``; ``shape`` is the weight as the model holds it."""
        rows = np.transpose(value, (0, 2, 3, 1))  # OIHW -> O,H,W rows of input channels
        fmt_name, layout, consts, ts = self._kernel_constants(layer, rows, op, shape)
        x_shape = tuple(_static(d) if i == 0 else d for i, d in enumerate(_dims(x)))
        func = conv2d_kernel(fmt_name, layout, x_shape, value.shape, strides, padding, dilation, ts)
        gv = add_kernel(self.builder_, func, _kernel_name(op, fmt_name, x_shape + value.shape, layer, ts),
                        {KERNEL_ATTR: "conv2d"})
        return relax.call_tir(gv, [x, *consts], relax.TensorType(out_shape, "float32"))


def row_tiles_apply(fmt_name: str, n: int, k: int, device: str, target) -> bool:
    """Whether a batch-1 ``n x k`` layer in ``fmt_name`` takes ``row_tile_gemv`` on ``target``: a block
    format whose codes fill 32-bit words, on an x86 CPU with AVX2 or AVX-512."""
    row = wf.resolve(fmt_name)
    isa = vector_isa(target)
    return device == "cpu" and row.family == "block" and isa is not None and row_tiles_fit(row.block, n, k, isa)


def mx_dot_applies(fmt_name: str, n: int, k: int, device: str, target) -> bool:
    """Whether a batch-1 ``n x k`` layer in ``fmt_name`` can take ``mx_dot_gemv`` (its input quantized
    to MXINT8) on ``target``: a row-tile GEMV whose format ``mx_dot_gemv`` takes."""
    return row_tiles_apply(fmt_name, n, k, device, target) and mx_dot_fits(block_format(fmt_name), n, k, vector_isa(target))


def row_tile_function(fmt_name: str, weight_rows: np.ndarray, target, activations: str = "float32"):
    """(kernel, constants, tensor scale, record fields) of the batch-1 ``row_tile_gemv`` of a weight given
    as rows of input channels, for the vector units of ``target`` (see :func:`row_tiles_apply`); with
    ``activations="mxint8"``, ``mx_dot_gemv`` over the same constants (see :func:`mx_dot_applies`)."""
    (codes, scales), tensor_scale, fields = weight_constants(fmt_name, weight_rows, PACKED)
    fmt = block_format(fmt_name)
    isa = vector_isa(target)
    kernel, tiles = ((mx_dot_kernel, mx_dot_tiles) if check_activations(activations) == MX_DOT_INPUT
                     else (row_tile_kernel, tile_rows))
    tiled = tiles(codes, scales, fmt, isa)
    specials = needs_scale_specials(fmt.scale, tiled[1])  # the weight's own: a kernel without them where none are
    return kernel(fmt, *weight_rows.shape, isa, tensor_scale, specials), tiled, tensor_scale, fields


def check_activations(activations: str) -> str:
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}, got {activations!r}")
    return activations


def dense_function(fmt_name: str, layout: str | None, m: int | None, n: int, k: int, tensor_scale: float | None):
    """The dense kernel of one layer (``m`` None: any batch), with what ``build.schedule`` needs to schedule it."""
    func = dense_kernel(fmt_name, layout, m, n, k, tensor_scale)
    bits = wf.resolve(fmt_name).element_bits
    lanes = dense_lanes(reduction_block(fmt_name, k), layout or PACKED, bits)
    return func.with_attr({KERNEL_ATTR: "dense", "edgekit.lanes": lanes,
                           "edgekit.parallel": (m or 1) * n * k >= PARALLEL_MIN_WEIGHTS})


def _symbol(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text) or "layer"


def _kernel_name(op: str, fmt_name: str, shape, layer: str, tensor_scale: float | None) -> str:
    """A kernel's name: by format and shape, so that layers of one shape share one kernel (the
    BlockBuilder merges structurally equal functions and the binary holds it once); by layer
    when a per-tensor scale is compiled in, which makes the kernel the layer's own."""
    if tensor_scale is not None:
        return f"{op}_{_symbol(fmt_name)}_{_symbol(layer)}"
    return f"{op}_{_symbol(fmt_name)}_{'x'.join('any' if d is None else str(d) for d in shape)}"


def lower(imported: ImportedModel, plan: dict[str, str], device: str = "cpu", encoded: dict | None = None,
          target=None, activations: str = "float32") -> LoweredModel:
    """Swap every planned weight for packed codes + a fused decode kernel; bind the rest.

    ``encoded`` gives LiftQuant layers their codes (layer -> ``LiftQuantTensor``, e.g.
    ``edgekit quantize --codes``); other LiftQuant layers are encoded here. ``target`` (the build's
    TVM target) schedules CUDA LiftQuant GEMVs for its arch and picks batch-1 CPU GEMVs for its vector
    units (``row_tile_gemv``). ``activations="mxint8"`` quantizes the input of each of those GEMVs that
    ``mx_dot_gemv`` takes (:func:`mx_dot_applies`) to MXINT8 in the kernel, as an MX matrix unit does;
    its layer record says so, and the other layers keep their float input. A plan where no layer can
    is refused.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    check_activations(activations)
    plan = check_plan(imported.layers, plan)
    unplanned = sorted(set(encoded or {}) - {layer for layer, fmt in plan.items() if is_liftquant(fmt)})
    if unplanned:
        raise ValueError(f"codes are given for layers {', '.join(unplanned)} that the plan does not code in LiftQuant")
    weights = {imported.layers[layer]: (layer, imported.params[imported.layers[layer]]) for layer in plan}
    mutator = _LowerWeights(imported.mod, weights, plan, device, encoded, target, activations)
    main = mutator.visit_expr(imported.mod["main"])
    mutator.builder_.update_func(mutator.builder_.get().get_global_var("main"), main)
    mod = mutator.builder_.get()
    if activations != "float32" and not any(r.activations == activations for r in mutator.records.values()):
        raise ValueError(f"--activations {activations}: no layer of this build can quantize its input here; it "
                         f"applies to batch-1 Linear layers in {', '.join(mx_dot_formats())} on x86 CPUs with AVX2 "
                         "(compile with --max-batch 1)")
    missing = sorted(set(plan) - set(mutator.records))
    if missing:
        raise ValueError(f"layers {', '.join(missing)} are not used as a plain matmul, conv2d or conv1d weight "
                         "(grouped or non-NCHW convolutions, shared weights); leave them out of the plan")
    params = {name: tvm.runtime.tensor(value) for name, value in imported.params.items()}
    mod = relax.transform.BindParams("main", params)(mod)
    mod = relax.transform.DeadCodeElimination()(mod)
    return LoweredModel(mod, dict(sorted(mutator.records.items())), imported.inputs, imported.outputs, device)
