"""GET /v1/models."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import ModelDep
from app.api.openapi_docs import ERRORS
from app.errors import ModelNotFoundError
from app.schemas.models import Model, ModelList

router = APIRouter()


@router.get("/v1/models", response_model=ModelList, summary="List models", responses=ERRORS)
async def list_models(model: ModelDep) -> ModelList:
    """List the served model."""
    return ModelList(data=[Model(id=model.id, created=model.created)])


@router.get(
    "/v1/models/{model_id:path}",
    response_model=Model,
    summary="Retrieve a model",
    responses=ERRORS,
)
async def retrieve_model(model_id: str, model: ModelDep) -> Model:
    """Describe the served model."""
    if model_id != model.id:
        raise ModelNotFoundError(f"The model '{model_id}' does not exist.", param="model")
    return Model(id=model.id, created=model.created)
