"""Load a Kubernetes manifest strictly into the published API models (test helper).

The generated models of ``kubeflow-trainer-api`` (pydantic) and of ``kubeflow-training`` /
``kubernetes`` (swagger-style classes) both DROP fields they do not know: ``from_dict`` reads only
the keys it declares, and the swagger deserializer does the same. So an unknown or misspelled field
would pass unnoticed. :func:`load` walks the manifest against each model's declared fields first
(every key must be declared; every scalar must have the declared type: an ``int`` is not a string,
nor a bool) and then lets the models themselves build the object (pydantic's Strict types, the
swagger models' client-side validation of required fields and enums).
"""

from __future__ import annotations

import datetime
import re
import typing

import pydantic


class Invalid(AssertionError):
    """The manifest does not fit the model; the message names the path."""


# -- pydantic models (kubeflow-trainer-api) ----------------------------------------------------


def _strip_optional(annotation):
    if typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_optional(args[0])
    if typing.get_origin(annotation) is typing.Annotated:
        return _strip_optional(typing.get_args(annotation)[0])
    return annotation


def _walk_pydantic(annotation, data, path: str) -> None:
    annotation = _strip_optional(annotation)
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        if "actual_instance" in annotation.model_fields:  # a oneOf (Quantity: str | number): the model checks it
            try:
                annotation(data)
            except (pydantic.ValidationError, ValueError) as err:
                raise Invalid(f"{path}: {err}") from None
            return
        if not isinstance(data, dict):
            raise Invalid(f"{path}: expected an object for {annotation.__name__}, got {type(data).__name__}")
        fields = {(field.alias or name): field for name, field in annotation.model_fields.items()}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise Invalid(f"{path}: unknown field(s) {unknown} for {annotation.__name__}")
        for key, value in data.items():
            _walk_pydantic(fields[key].annotation, value, f"{path}.{key}")
    elif origin in (list, typing.List):  # noqa: UP006
        if not isinstance(data, list):
            raise Invalid(f"{path}: expected a list, got {type(data).__name__}")
        (item,) = typing.get_args(annotation)
        for i, value in enumerate(data):
            _walk_pydantic(item, value, f"{path}[{i}]")
    elif origin in (dict, typing.Dict):  # noqa: UP006
        if not isinstance(data, dict):
            raise Invalid(f"{path}: expected a map, got {type(data).__name__}")
        _, item = typing.get_args(annotation)
        for key, value in data.items():
            _walk_pydantic(item, value, f"{path}.{key}")
    # scalars: pydantic's Strict* types check them when the model is built


def load_pydantic(model: type[pydantic.BaseModel], data: dict):
    _walk_pydantic(model, data, model.__name__)
    try:
        return model.from_dict(data)
    except pydantic.ValidationError as err:
        raise Invalid(str(err)) from None


# -- swagger models (kubeflow-training, kubernetes) ----------------------------------------------

_SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def _klass(name: str):
    import kubernetes.client.models as k8s_models
    from kubeflow.training import models as training_models

    for module in (training_models, k8s_models):
        if hasattr(module, name):
            return getattr(module, name)
    raise Invalid(f"no model named {name}")


def _walk_swagger(type_name: str, data, path: str):
    """Check ``data`` against ``type_name`` and build the model object from it."""
    if type_name in _SCALARS:
        expected = _SCALARS[type_name]
        if type_name == "int" and isinstance(data, bool) or not isinstance(data, expected):
            raise Invalid(f"{path}: expected {type_name}, got {type(data).__name__} {data!r}")
        return data
    if type_name == "datetime":
        if not isinstance(data, (str, datetime.datetime)):
            raise Invalid(f"{path}: expected a timestamp")
        return data
    match = re.fullmatch(r"list\[(.+)\]", type_name)
    if match:
        if not isinstance(data, list):
            raise Invalid(f"{path}: expected a list, got {type(data).__name__}")
        return [_walk_swagger(match.group(1), v, f"{path}[{i}]") for i, v in enumerate(data)]
    match = re.fullmatch(r"dict\(([^,]+), (.+)\)", type_name)
    if match:
        if not isinstance(data, dict):
            raise Invalid(f"{path}: expected a map, got {type(data).__name__}")
        return {k: _walk_swagger(match.group(2), v, f"{path}.{k}") for k, v in data.items()}
    klass = _klass(type_name)
    if not isinstance(data, dict):
        raise Invalid(f"{path}: expected an object for {type_name}, got {type(data).__name__}")
    by_json = {json_key: attr for attr, json_key in klass.attribute_map.items()}
    unknown = sorted(set(data) - set(by_json))
    if unknown:
        raise Invalid(f"{path}: unknown field(s) {unknown} for {type_name}")
    kwargs = {by_json[k]: _walk_swagger(klass.openapi_types[by_json[k]], v, f"{path}.{k}") for k, v in data.items()}
    try:
        return klass(**kwargs)  # client-side validation: required fields, enums
    except ValueError as err:
        raise Invalid(f"{path}: {err}") from None


def load_pytorchjob(data: dict):
    return _walk_swagger("KubeflowOrgV1PyTorchJob", data, "PyTorchJob")


def load_trainjob(data: dict):
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    return load_pydantic(TrainerV1alpha1TrainJob, data)


def load(data: dict):
    """A TrainJob or a PyTorchJob, by its kind and apiVersion."""
    kind, api = data.get("kind"), data.get("apiVersion")
    if (kind, api) == ("TrainJob", "trainer.kubeflow.org/v1alpha1"):
        return load_trainjob(data)
    if (kind, api) == ("PyTorchJob", "kubeflow.org/v1"):
        return load_pytorchjob(data)
    raise Invalid(f"unknown kind/apiVersion {kind}/{api}")
