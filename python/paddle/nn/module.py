"""paddle.nn.Module for models written in Python, with Parameter, ModuleList, ModuleDict and
Sequential.

A subclass is a real C++ nn::Module (python/bindings/py_module.h): assigning a Parameter, a
registered buffer or a module (Python-defined or a C++ layer such as paddle.nn.Linear) to an
attribute registers it there, so parameters(), named_parameters(), state_dict(),
load_state_dict(), train()/eval(), to(device), optimizers and DistributedDataParallel work the
same for both kinds, and the layers' compute stays in C++.
"""
import collections

import numpy as np

from paddle import _C
from paddle._C import Tensor

_CModule = _C.nn.Module


class Parameter(Tensor):
    """A tensor a Module trains: assign it to a module attribute to register it.

    `data` is a paddle.Tensor (its memory is shared) or anything numpy accepts (copied,
    float64 kept as given).
    """

    def __init__(self, data, requires_grad=True):
        if not isinstance(data, Tensor):
            array = np.array(data, copy=True)
            data = Tensor.from_numpy(np.ascontiguousarray(array), False, "", None)
        super().__init__(data, requires_grad)


class Module(_CModule):
    """Base class of models written in Python: define __init__ (calling super().__init__()
    first) and forward(*inputs)."""

    def __init__(self):
        _CModule.__init__(self, type(self).__name__)
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        # Holds every child's Python object: Note [Python module lifetime] in py_module.h.
        object.__setattr__(self, "_modules", collections.OrderedDict())

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def __call__(self, *inputs, **kwargs):
        return self.forward(*inputs, **kwargs)

    def _check_init(self, name):
        if "_modules" not in self.__dict__:
            raise AttributeError(f"cannot assign '{name}' before {type(self).__name__}.__init__ "
                                 "calls super().__init__()")

    def __setattr__(self, name, value):
        self._check_init(name)
        if isinstance(value, Parameter):
            self.register_parameter(name, value)
        elif isinstance(value, _CModule):
            self.add_module(name, value)
        elif name in self._parameters:
            raise TypeError(f"cannot assign {type(value).__name__} to parameter '{name}' of "
                            f"{type(self).__name__}: assign a paddle.nn.Parameter")
        elif name in self._buffers:
            if not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} to buffer '{name}' of "
                                f"{type(self).__name__}: assign a paddle.Tensor")
            self.register_buffer(name, value)
        elif name in self._modules:
            raise TypeError(f"cannot assign {type(value).__name__} to submodule '{name}' of "
                            f"{type(self).__name__}: assign a paddle.nn.Module")
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name):
        if name in self._parameters or name in self._buffers or name in self._modules:
            raise AttributeError(f"'{name}' of {type(self).__name__} is registered and cannot "
                                 "be deleted; assign a new value instead")
        object.__delattr__(self, name)

    def _check_name(self, name, what):
        self._check_init(name)
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"{what} name must be a non-empty str without '.', got {name!r}")

    def register_parameter(self, name, param):
        """Registers `param` (a Parameter) under `name`; the attribute is the parameter itself."""
        self._check_name(name, "parameter")
        if not isinstance(param, Parameter):
            raise TypeError(f"register_parameter('{name}'): expected a paddle.nn.Parameter, got "
                            f"{type(param).__name__}")
        self._set_parameter(name, param)
        self._parameters[name] = param
        object.__setattr__(self, name, param)

    def register_buffer(self, name, tensor):
        """Registers `tensor` as a buffer: saved in state_dict and moved by to(), not trained."""
        self._check_name(name, "buffer")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer('{name}'): expected a paddle.Tensor, got "
                            f"{type(tensor).__name__}")
        self._set_buffer(name, tensor)
        self._buffers[name] = tensor
        object.__setattr__(self, name, tensor)

    def add_module(self, name, module):
        self._check_name(name, "module")
        if not isinstance(module, _CModule):
            raise TypeError(f"add_module('{name}'): expected a paddle.nn.Module, got "
                            f"{type(module).__name__}")
        if name in self._parameters or name in self._buffers:
            raise KeyError(f"'{name}' of {type(self).__name__} is already a parameter or buffer")
        self._set_module(name, module)
        self._modules[name] = module
        object.__setattr__(self, name, module)

    register_module = add_module

    def named_children(self):
        return iter(self._modules.items())

    def children(self):
        return iter(self._modules.values())

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, child in self._modules.items():
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(child, Module):
                yield from child.named_modules(path)
            else:
                yield path, child

    def modules(self):
        return (m for _, m in self.named_modules())

    def buffers(self):
        return [b for _, b in self.named_buffers()]

    def apply(self, fn):
        """fn(module) for every submodule, then for this one; returns self."""
        for child in self._modules.values():
            if isinstance(child, Module):
                child.apply(fn)
            else:
                fn(child)
        fn(self)
        return self

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._modules.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        if len(lines) == 1:
            return lines[0] + ")"
        return "\n".join(lines) + "\n)"


class Sequential(Module):
    """Modules applied in order; each may be a Python module or a C++ layer."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], collections.OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for m in modules:
                self.append(m)

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        items = list(self._modules.values())
        if isinstance(i, slice):
            return Sequential(*items[i])
        return items[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(Module):
    """A list of modules whose parameters are registered (names "0", "1", ...)."""

    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i):
        items = list(self._modules.values())
        return ModuleList(items[i]) if isinstance(i, slice) else items[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, *inputs):
        raise NotImplementedError("ModuleList has no forward(); iterate over it instead")


class ModuleDict(Module):
    """A dict of modules whose parameters are registered under their keys."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for name, m in items:
            self[name] = m

    def __setitem__(self, name, module):
        self.add_module(name, module)

    def __getitem__(self, name):
        return self._modules[name]

    def __contains__(self, name):
        return name in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def forward(self, *inputs):
        raise NotImplementedError("ModuleDict has no forward(); index it instead")
